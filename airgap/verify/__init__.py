"""airgap.verify."""
