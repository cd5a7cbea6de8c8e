"""airgap.mirror."""
