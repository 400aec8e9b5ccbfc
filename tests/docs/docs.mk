# Documentation checks.
TEST_SCRIPTS += tests/docs/env-table.sh
