"""airgap.providers."""
