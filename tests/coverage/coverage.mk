# `make coverage`: the suite (make test, including the Soft-RoCE VM run,
# whose counters are merged in) on a build with gcov counters in
# build-cov/, then line coverage per plugin/ and topo/ file
# (tests/coverage/report.sh; gcov and gcov-tool come with gcc).  The
# figures are printed even when a test fails; the target then fails too.
COV_BUILD := build-cov
# -O1 as the sanitizer build: at -O0/-Og gcc warns (-Wformat-truncation) in
# plugin/ib_init.c, and warnings are errors.
COV_MAKE := $(MAKE) BUILD=$(COV_BUILD) SANFLAGS=--coverage OPT=-O1

.PHONY: coverage coverage-clean
coverage:
	@if [ -d $(COV_BUILD) ]; then find $(COV_BUILD) -name '*.gcda' -delete; fi
	$(COV_MAKE) all
	@st=0; $(COV_MAKE) test || st=$$?; \
	  tests/coverage/report.sh $(COV_BUILD) plugin topo; \
	  if [ $$st -ne 0 ]; then echo "coverage: make test failed (status $$st)"; fi; exit $$st

coverage-clean:
	rm -rf $(COV_BUILD)
clean: coverage-clean
