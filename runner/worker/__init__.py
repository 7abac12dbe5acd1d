"""The worker process: the run pipeline, the only module that starts agent CLIs, pickup, jobs
and the main loop. Nothing but the `runworker` command (and so the `malamar` command) imports
it; what the web needs (run records, traces, health) lives in `runner` outside this package."""
