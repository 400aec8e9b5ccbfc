# Installing railnet (included by the top-level Makefile).
#
#   make install [PREFIX=/usr/local] [LIBDIR=$(PREFIX)/lib] [DESTDIR=]
#       lib/libnccl-net-railnet.so, bin/railnet-topo, bin/railnet-kvbench,
#       share/man/man1/railnet-topo.1
#   make install LINK_DEFAULT=1
#       also lib/libnccl-net.so -> libnccl-net-railnet.so.  NCCL loads
#       libnccl-net.so when NCCL_NET_PLUGIN is unset, so this makes railnet
#       the plugin of every NCCL that finds that directory; without it, only
#       jobs that set NCCL_NET_PLUGIN=railnet use railnet.
#   make uninstall [same PREFIX/LIBDIR/DESTDIR]
#       removes those files; libnccl-net.so only when it is railnet's link.
#   make deb
#       $(BUILD)/deb/railnet_<version>_<arch>.deb (scripts/deb/build-deb.sh)
LIBDIR ?= $(PREFIX)/lib
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
LINK_DEFAULT ?= 0

.PHONY: install uninstall deb
install: all $(KVBENCH)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1
	install -m 0644 $(PLUGIN_SO) $(DESTDIR)$(LIBDIR)/libnccl-net-railnet.so
	install -m 0755 $(TOPO_CLI) $(DESTDIR)$(BINDIR)/railnet-topo
	install -m 0755 $(KVBENCH) $(DESTDIR)$(BINDIR)/railnet-kvbench
	install -m 0644 topo/railnet-topo.1 $(DESTDIR)$(MANDIR)/man1/railnet-topo.1
	@if [ "$(LINK_DEFAULT)" = 1 ]; then \
	  echo "ln -sf libnccl-net-railnet.so $(DESTDIR)$(LIBDIR)/libnccl-net.so"; \
	  ln -sf libnccl-net-railnet.so $(DESTDIR)$(LIBDIR)/libnccl-net.so; \
	  echo "note: railnet is now the default net plugin of every NCCL that finds $(LIBDIR)"; \
	else \
	  echo "note: set NCCL_NET_PLUGIN=railnet to use it (make install LINK_DEFAULT=1 makes it every NCCL's default)"; \
	fi

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libnccl-net-railnet.so $(DESTDIR)$(BINDIR)/railnet-topo \
	  $(DESTDIR)$(BINDIR)/railnet-kvbench $(DESTDIR)$(MANDIR)/man1/railnet-topo.1
	@l=$(DESTDIR)$(LIBDIR)/libnccl-net.so; \
	if [ -L "$$l" ] && [ "$$(readlink "$$l")" = libnccl-net-railnet.so ]; then \
	  echo "rm -f $$l"; rm -f "$$l"; \
	elif [ -e "$$l" ]; then echo "note: $$l is not railnet's link; left alone"; fi

deb: all
	scripts/deb/build-deb.sh $(BUILD) $(BUILD)/deb
