"""Analysis of a run directory, after its trials: statistics (`stats`), paging and sweep
predictions (`paging`, `sweep_analysis`), plots and the tables printed after a run, the
analyses written before the seal (`run_analyses`) and the HTML report's page (`html_report`).
Reads run directories through `appliance.runs.run_dir`; imports neither Docker nor Ray.

May import: core, engine, host, models, trace, images, planner, runs.
"""
