"""ddpbench's Python side: readers of the results JSON, reports and regression checks.

results.py           the results JSON: loading, its schema checked, and the figures read from it
cases.py             the cases of one or more results files, as the report reads them
charts.py            the report's charts, one PNG each
pipeline_timeline.py each pp case's timeline, one row a rank, from the run's trace files
report.py            scripts/ddpbench-report: the charts and one self-contained HTML page
compare.py           scripts/ddpbench-compare: a verdict per case between two results files
ab.py                scripts/ddpbench-ab: two builds in interleaved rounds until each case is decided
levers.py            the memory levers compared: a case's settings against its plain run, in words
lever_sweep.py       scripts/ddpbench-levers: the levers' grid in interleaved rounds, then the report
stats.py             statistics for comparing runs: pure functions
projection_file.py   ddpbench-project's JSON, read back for the report
files.py             inputs read only from regular files, outputs written whole or not at all
args.py              bad input is one line naming the flag, and exit 2
"""
