# nodesmith packages: included from the top-level Makefile (after the binaries are defined).
#   make packages    the agent's .deb (dpkg-deb) and, when rpmbuild is installed, its .rpm for
#                    Amazon Linux 2023, both from the objects already built in $(BUILD)
#   make deb | rpm   one of them
#   make rpm-agent   the agent as the rpm ships it ($(BUILD)/rpm/nodesmith-agent)
# Nothing is downloaded.

PKG_VERSION  := $(shell sed -n 's/^\#define AGENT_VERSION "\(.*\)"/\1/p' agent/agent.h)
DEB_ARCH     := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
RPM_ARCH     := $(shell uname -m)
RPMBUILD     := $(shell command -v rpmbuild 2>/dev/null)

DEB_FILE := $(BUILD)/nodesmith-agent_$(PKG_VERSION)_$(DEB_ARCH).deb
RPM_FILE := $(BUILD)/nodesmith-agent-$(PKG_VERSION)-1.$(RPM_ARCH).rpm

PKG_INPUTS := packaging/systemd/nodesmith-agent.service packaging/systemd/nodesmith.sysusers \
              packaging/systemd/nodesmith.tmpfiles packaging/etc/agent.conf docs/packaging.md
DEB_INPUTS := $(PKG_INPUTS) packaging/deb/build-deb.sh packaging/deb/control.in \
              packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm \
              packaging/deb/changelog packaging/deb/copyright
RPM_INPUTS := $(PKG_INPUTS) packaging/rpm/nodesmith-agent.spec

# The rpm's agent. Amazon Linux 2023 ships neither NNG nor mbedTLS nor cJSON, so the agent in the
# rpm carries them, linked statically: NNG and mbedTLS from Debian's libnng-dev and libmbedtls-dev
# (libnng.a, libmbed*.a), cJSON compiled from third_party/cjson (Debian's libcjson-dev has no
# libcjson.a), and protobuf-c and libyaml from their -dev packages too, so that the rpm needs
# nothing beyond what every AL2023 AMI already has installed: glibc and systemd-libs
# (libsystemd). Its HTTP client is NNG's (lib/http-nng.c, docs/http.md): no libcurl, no OpenSSL.
RPM_AGENT       := $(BUILD)/rpm/nodesmith-agent
RPM_CJSON_O     := $(BUILD)/rpm/cJSON.o
RPM_STATIC_LIBS := -lnng -lmbedtls -lmbedx509 -lmbedcrypto -lprotobuf-c -lyaml
RPM_SHARED_LIBS := $(filter-out -lnng -lmbedx509 -lmbedcrypto -lcjson -lprotobuf-c -lyaml,$(LIBS))

.PHONY: packages deb rpm rpm-agent
packages: deb $(if $(RPMBUILD),rpm)
deb: $(DEB_FILE)
rpm: $(RPM_FILE)
rpm-agent: $(RPM_AGENT)

$(DEB_FILE): $(AGENT_BIN) $(DEB_INPUTS)
	@echo "  DEB     $@"
	$(Q)bash packaging/deb/build-deb.sh $(AGENT_BIN) $(PKG_VERSION) $(BUILD) >/dev/null

$(RPM_CJSON_O): third_party/cjson/cJSON.c third_party/cjson/cJSON.h
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) -std=c89 $(OPT) $(CFLAGS) -c -o $@ $<

$(RPM_AGENT): $(BUILD)/agent/main.o $(HTTP_NNG_O) $(AGENT_A) $(NODE_A) $(LIB_A) $(RPM_CJSON_O)
	@mkdir -p $(@D)
	@echo "  LD      $@ (NNG, mbedTLS, cJSON, protobuf-c, libyaml static)"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ -Wl,-Bstatic $(RPM_STATIC_LIBS) -Wl,-Bdynamic $(RPM_SHARED_LIBS)

$(RPM_FILE): $(RPM_AGENT) $(RPM_INPUTS)
	@test -n "$(RPMBUILD)" || { echo "rpm: rpmbuild is not installed (Debian: apt-get install rpm)" >&2; exit 1; }
	@echo "  RPM     $@"
	$(Q)rm -rf $(BUILD)/rpmbuild && mkdir -p $(BUILD)/rpmbuild
	$(Q)rpmbuild -bb --quiet --nodeps --target $(RPM_ARCH) \
	  --define "_topdir $(abspath $(BUILD)/rpmbuild)" \
	  --define "_rpmdir $(abspath $(BUILD)/rpmbuild/RPMS)" \
	  --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
	  --define "_dbpath $(abspath $(BUILD)/rpmbuild/db)" \
	  --define "dist %{nil}" \
	  --define "pkg_version $(PKG_VERSION)" \
	  --define "bindir_src $(abspath $(dir $(RPM_AGENT)))" \
	  --define "srcroot $(CURDIR)" \
	  packaging/rpm/nodesmith-agent.spec
	$(Q)mv $(BUILD)/rpmbuild/RPMS/nodesmith-agent-$(PKG_VERSION)-1.$(RPM_ARCH).rpm $@
