"""One run of a profile: the profile, the trial plan, preparation, execution in containers,
statistics, report, plots and the paging prediction from each trial's trace.

May import: core, engine, host, models, trace, images, planner.
"""
