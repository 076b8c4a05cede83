//! Integration-test harness (see tests/README.md).
