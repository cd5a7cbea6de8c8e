"""The suite's fixtures, registered as plugins grouped by concern (tests/harness/).

Each plugin module's docstring says what it provides; everything listens on 127.0.0.1
ephemeral ports and is stopped at teardown, also when tests fail.
"""

pytest_plugins = [
    # pytester: tests/test_tiers.py runs the tiers plugin on small inner suites
    "pytester",
    # tier marks: every test in exactly one of unit / integration / e2e (tests/harness/tiers.py)
    "tests.harness.tiers",
    # autouse isolation: skopeo's config files, airgap's cache
    "tests.harness.sandbox_fixtures",
    # registries, token server, fault proxy, PKI, the image corpus pushed into them
    "tests.harness.registry_fixtures",
    # release servers laid out like GitHub releases (release_server, tls_release_server)
    "tests.harness.releases",
    # bundles built through the real CLI: signing key, CAPI, delta, management
    "tests.harness.bundle_fixtures",
    "tests.harness.delta_fixtures",
    "tests.harness.management_fixtures",
]
