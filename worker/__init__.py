"""The worker process: the run pipeline, the only module that starts agent CLIs, pickup, jobs
and the main loop. Only the commands that run CLIs import it (`runworker` and `malamar`, which
start the worker; `doctor`, which probes each CLI): what the web needs (run records, traces,
health) lives in `runner` outside this package."""
