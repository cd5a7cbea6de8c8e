"""``python -m airgap``: the same as the ``airgap`` command."""

from airgap.cli import main

if __name__ == "__main__":
    main()
