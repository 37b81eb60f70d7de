"""Analysis of a run directory, after its trials: statistics (`stats`), paging and sweep
predictions (`paging`, `sweep_analysis`), plots and the tables printed after a run. Reads run
directories through `appliance.runs.run_dir`; imports neither Docker nor Ray."""
