"""The decision, CPU only: from the measured runs to the verdict and its figures."""
