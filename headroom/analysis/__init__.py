"""Analysis stages, CPU only: dispatch policies (train/test), roofline with L2 residency, decision."""
