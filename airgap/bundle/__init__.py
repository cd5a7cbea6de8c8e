"""airgap.bundle."""
