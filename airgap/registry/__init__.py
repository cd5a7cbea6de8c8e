"""airgap.registry."""
