"""airgap: carry Cluster API providers and their container images across an air gap."""

__version__ = "0.1.0"
