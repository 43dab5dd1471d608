"""`gpuledger bench e2e`: claims through the whole real stack, timed and checked.

`stack` starts `gpuledger up --demo` (the very command a user runs), `cpu` reads the CPU time of
every process it started, `load` publishes raw JSON claims to the intake open loop, `follow`
watches the decisions and releases each allocated claim, `check` folds the log afterwards
(independently of the services) for lost claims, double booking and bindings the fold does not
back, and `run` puts it together into one JSON object (or a table for `--sweep`).
"""
