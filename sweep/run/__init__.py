"""Running a study: the plan (`plan`: which trials run, resume decisions), Ray (`ray_session`), Ray Tune's
schedulers (`schedulers`) and the trial feed (`feed`), the job it hands a trial's worker (`job`), the
trial's worker (`worker`) and its files on another node (`trial_files`), events from running trials
(`trial_events`), node checks and watching (`node_checks`, `node_watch`), checks before anything is
scheduled (`preflight`), stop signals and clean-up (`stopping`, `reaper`), loggers (`trackers`), the
progress lines (`progress`), and the study run that drives them all (`runner`, which has a plan).

Imports sweep.records, sweep.spec and the bottom modules, never sweep.commands or the CLI.
"""
