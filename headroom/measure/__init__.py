"""GPU stages: candidates, correctness, portfolio timing, lifecycle costs, CUDA Graph working-set
sweep, machine calibration and the environment record; timing, runner and noise are shared by them."""
