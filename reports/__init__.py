"""ddpbench's Python side: readers of the results JSON, reports and regression checks."""
