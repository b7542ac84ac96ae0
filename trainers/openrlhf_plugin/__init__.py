"""The OpenRLHF face: the CLEANER agent executor, the GPU environments and the first-run GPU smoke."""
