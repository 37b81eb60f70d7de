"""One run of a profile, up to its trials' records: the profile and its memory points, the model
files, the trial plan and placement, a sweep's plan, preparation, how long a trial may take
(`trial_time`), execution in containers (one trial, the local executor, resume), the run
directory's layout and records, and what `run` and `sweep` print before the trials
(`preview`). What comes after the trials (statistics, results.json, plots, the tables printed
after a run, paging and sweep predictions) is `appliance.analysis`.

May import: core .. planner.
"""
