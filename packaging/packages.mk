# nodesmith packages: included from the top-level Makefile (after the binaries are defined).
#   make packages    the agent's .deb (dpkg-deb) and, when rpmbuild is installed, its .rpm for
#                    Amazon Linux 2023, both from the binaries already built in $(BUILD)
#   make deb | rpm   one of them
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

.PHONY: packages deb rpm
packages: deb $(if $(RPMBUILD),rpm)
deb: $(DEB_FILE)
rpm: $(RPM_FILE)

$(DEB_FILE): $(AGENT_BIN) $(DEB_INPUTS)
	@echo "  DEB     $@"
	$(Q)bash packaging/deb/build-deb.sh $(AGENT_BIN) $(PKG_VERSION) $(BUILD) >/dev/null

$(RPM_FILE): $(AGENT_BIN) $(RPM_INPUTS)
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
	  --define "bindir_src $(abspath $(dir $(AGENT_BIN)))" \
	  --define "srcroot $(CURDIR)" \
	  packaging/rpm/nodesmith-agent.spec
	$(Q)mv $(BUILD)/rpmbuild/RPMS/nodesmith-agent-$(PKG_VERSION)-1.$(RPM_ARCH).rpm $@
