"""airgap.collect."""
