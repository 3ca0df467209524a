"""KernelBench's correctness check (paper-era and hardened), its agreement study and the differential."""
