"""Analysis of a run directory, after its trials: statistics (`stats`), results.json and the
run's plots (`results`, `plots`), the capacity model and paging predictions (`capacity`,
`paging`), a sweep's predictions beside its measurements (`sweep_analysis`, `sweep_plots`),
expert-cache trials beside their replay (`cache_analysis`), reads below Belady flagged
(`contamination`), the engine's placement beside the planner's (`placement`), the analyses
written before the seal (`run_analyses`), the tables printed after a run (`run_summary`,
`sweep_report`) and the HTML report's page (`html_report`). Reads run directories through
`appliance.runs.run_dir`; imports neither Docker nor Ray.

May import: core .. runs.
"""
