"""Device implementations behind the driver's port: bit-exact model, Verilator harness."""
