# Packaging: make install/uninstall and the Debian package, installed into
# a clean root and loaded from there.
TEST_SCRIPTS += tests/deb/packaging.sh
