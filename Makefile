# railnet top-level build.  `make` builds the plugin and the CLI, `make test`
# runs the suite, `make SAN=1 test` the same under ASan+UBSan,
# `make valgrind` part of it under memcheck (tests/valgrind/valgrind.mk),
# `make tsan` its threaded part under ThreadSanitizer (tests/tsan/tsan.mk),
# `make install`/`uninstall`/`deb` (scripts/install.mk).
# Each area adds its own rules in its .mk file.

PREFIX ?= /usr/local
CC ?= cc
PKG_CONFIG ?= pkg-config

ifeq ($(SAN),1)
BUILD ?= build-san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT := -O1
else ifeq ($(TSAN),1)
# -Wno-tsan: the verbs transport's fences order reads of memory the NIC
# writes, which ThreadSanitizer does not model (it warns that it ignores them)
BUILD ?= build-tsan
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan
OPT := -O1
else
BUILD ?= build
SANFLAGS :=
OPT := -O2
endif

WARN := -Wall -Wextra -Werror -Wmissing-prototypes -Wshadow -Wformat=2
CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -fPIC -Iinclude $(SANFLAGS)

HWLOC_CFLAGS := $(shell $(PKG_CONFIG) --cflags hwloc 2>/dev/null)
HWLOC_LIBS := $(shell $(PKG_CONFIG) --libs hwloc 2>/dev/null)
EXPAT_CFLAGS := $(shell $(PKG_CONFIG) --cflags expat 2>/dev/null)
EXPAT_LIBS := $(shell $(PKG_CONFIG) --libs expat 2>/dev/null)
# Verbs headers only: libibverbs is dlopened at run time, never linked.
HAVE_VERBS := $(shell $(PKG_CONFIG) --exists libibverbs 2>/dev/null && echo 1 || echo 0)
VERBS_CFLAGS := $(shell $(PKG_CONFIG) --cflags libibverbs 2>/dev/null)

LDFLAGS_COMMON := $(SANFLAGS)

.PHONY: all test install clean valgrind bench
all:

include topo/topo.mk
include plugin/plugin.mk
include tests/tests.mk
include scripts/install.mk

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(EXTRA_CFLAGS_$(subst /,_,$(dir $<))) -MMD -MP -c $< -o $@

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

clean:
	rm -rf build build-san build-tsan
