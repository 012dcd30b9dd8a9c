# nodesmith — one non-recursive GNU Makefile; everything is written to $(BUILD).
# make [all|test|demo|chaos|bench|controlplane|install|clean|packages]   V=1 verbose, SAN=1 ASan+UBSan,
# WERROR=1 -Werror, CFLAGS=... appended.

BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
PYTHON  ?= python3

ifeq ($(V),1)
Q :=
else
Q := @
endif

PKGS := libsystemd libcurl libprotobuf-c libcjson libxml-2.0 yaml-0.1 openssl tomlplusplus
DEPS_OK := $(shell pkg-config --exists $(PKGS) cmocka 2>/dev/null && test -e /usr/include/nng/nng.h \
             && test -e /usr/include/mbedtls/base64.h && command -v protoc-c >/dev/null && echo yes)

# Install what is missing before anything else is evaluated further.
ifneq ($(DEPS_OK),yes)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(info nodesmith: build dependencies missing; running bootstrap/deps-debian.sh)
$(shell bash bootstrap/deps-debian.sh >&2)
endif
endif

PKG_CFLAGS  := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS    := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)

WARN := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wformat=2 -Wno-format-nonliteral \
        -Wstrict-prototypes -Wmissing-prototypes -Wno-missing-field-initializers
ifeq ($(WERROR),1)
WARN += -Werror
endif
OPT := -O2 -g
# BROKEN_PDB=1: a deliberately broken build whose drains delete pods instead of evicting them
# (PodDisruptionBudgets ignored), only for the chaos runner's own test; never in build/.
ifeq ($(BROKEN_PDB),1)
ifeq ($(patsubst %/,%,$(BUILD)),build)
$(error BROKEN_PDB=1 builds a deliberately broken product: give it its own BUILD=build/...)
endif
OPT_DEFS := -DNODESMITH_BROKEN_DRAIN_DELETES_PODS
endif
ifeq ($(SAN),1)
OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_LDFLAGS := -fsanitize=address,undefined
endif

ALL_CFLAGS  := -std=gnu11 $(OPT) $(WARN) $(OPT_DEFS) -D_GNU_SOURCE -MMD -MP -pthread \
               $(PKG_CFLAGS) $(CFLAGS)
# Each layer sees only what it may use (docs/architecture.md; tests/layers.sh checks the
# sources): lib/ itself; node/ lib; agent/ node and lib; the solver lib; the rest of the
# coordinator its own folders (spelled "aws/ec2.h"), node and lib. Tests, tools, fuzz targets
# and benchmarks see everything. A header in the including file's own folder needs no -I.
LAYER_INC_lib         := -Ilib -I$(BUILD)/proto
LAYER_INC_node        := -Inode -Ilib -I$(BUILD)/proto
LAYER_INC_agent       := -Iagent -Inode -Ilib -I$(BUILD)/proto
LAYER_INC_solver      := -Ilib
LAYER_INC_coordinator := -Icoordinator -Inode -Ilib -I$(BUILD)/proto
LAYER_INC_test        := -Ilib -Inode -Iagent -Icoordinator -I$(BUILD)/proto -I.
layer_of = $(firstword $(if $(filter coordinator/solver/%,$(1)),solver) \
             $(foreach l,lib node agent coordinator,$(if $(filter $(l)/%,$(1)),$(l))) test)
layer_inc = $(LAYER_INC_$(call layer_of,$(1)))
ALL_LDFLAGS := -pthread -Wl,--as-needed $(SAN_LDFLAGS) $(LDFLAGS)
LIBS        := -lnng -lmbedx509 -lmbedcrypto $(PKG_LIBS) -lstdc++ -lm
# C++ only where a library has no C interface (coordinator/model/toml.cc: toml++)
ALL_CXXFLAGS := -std=c++17 $(OPT) -Wall -Wextra -Wno-unused-parameter $(if $(filter 1,$(WERROR)),-Werror) \
                -D_GNU_SOURCE -MMD -MP -pthread $(PKG_CFLAGS) $(CXXFLAGS)

# ---- sources -------------------------------------------------------------------------------
PROTO_SRC := proto/nodesmith.proto
PROTO_C   := $(BUILD)/proto/nodesmith.pb-c.c
PROTO_H   := $(BUILD)/proto/nodesmith.pb-c.h
PROTO_O   := $(BUILD)/proto/nodesmith.pb-c.o

# lib/http.h has two backends (docs/http.md): libcurl for the coordinator and the tools, NNG's
# HTTP client for the agent, which then maps neither libcurl nor OpenSSL.
LIB_SRCS    := $(filter-out lib/http-curl.c lib/http-nng.c,$(wildcard lib/*.c))
NODE_SRCS   := $(wildcard node/*.c)
SOLVER_SRCS := $(wildcard coordinator/solver/*.c)
AGENT_SRCS  := $(filter-out agent/main.c,$(wildcard agent/*.c))
CTL_SRCS    := $(wildcard coordinator/ctl/*.c)
COORD_SRCS  := $(filter-out coordinator/main.c $(SOLVER_SRCS) $(CTL_SRCS), \
                 $(wildcard coordinator/*.c coordinator/*/*.c)) $(wildcard coordinator/*/*.cc)

obj = $(patsubst %.cc,$(BUILD)/%.o,$(patsubst %.c,$(BUILD)/%.o,$(1)))

LIB_A    := $(BUILD)/libnodesmith.a
NODE_A   := $(BUILD)/libnode.a
SOLVER_A := $(BUILD)/libsolver.a
AGENT_A  := $(BUILD)/libagent.a
COORD_A  := $(BUILD)/libcoordinator.a
# objects, not archives: linked whole, ahead of the archives that resolve what they use
HTTP_CURL_O := $(BUILD)/lib/http-curl.o
HTTP_NNG_O  := $(BUILD)/lib/http-nng.o
ALL_LINK_LIBS := $(HTTP_CURL_O) $(COORD_A) $(AGENT_A) $(SOLVER_A) $(NODE_A) $(LIB_A)

AGENT_BIN := $(BUILD)/nodesmith-agent
COORD_BIN := $(BUILD)/nodesmith-coordinator
CTL_BIN   := $(BUILD)/nodesmithctl

UNIT_SRCS  := $(wildcard tests/unit/test-*.c)
UNIT_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/unit/%,$(UNIT_SRCS))
TOOL_SRCS  := $(wildcard tests/tools/*.c)
TOOL_BINS  := $(patsubst tests/tools/%.c,$(BUILD)/tools/%,$(TOOL_SRCS)) $(BUILD)/tools/kubeprobe-nng
FUZZ_SRCS  := $(wildcard tests/fuzz/fuzz-*.c)
FUZZ_BINS  := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
# make test compiles the fuzz targets with the normal compiler too, so an API change that breaks
# one fails at once rather than in the (clang-only) fuzz stage
FUZZ_OBJS  := $(patsubst %.c,$(BUILD)/%.o,$(FUZZ_SRCS))
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/benchbin/%,$(BENCH_SRCS))

.PHONY: all test test-unit test-integration demo chaos bench install clean fuzz fuzz-build helm
KUBECTL_PLUGIN := $(BUILD)/kubectl-nodesmith
all: $(AGENT_BIN) $(COORD_BIN) $(CTL_BIN) $(KUBECTL_PLUGIN)

# nodesmithctl as the kubectl plugin `kubectl nodesmith` (docs/observability.md): the same binary
$(KUBECTL_PLUGIN): $(CTL_BIN)
	$(Q)ln -sf nodesmithctl $@

# ---- rules ---------------------------------------------------------------------------------
$(PROTO_H): $(PROTO_SRC)
	@mkdir -p $(@D)
	@echo "  PROTOC  $<"
	$(Q)protoc-c --proto_path=proto --c_out=$(BUILD)/proto $<
$(PROTO_C): $(PROTO_H)

# Every object may include the generated header.
$(BUILD)/%.o: %.c | $(PROTO_H)
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALL_CFLAGS) $(call layer_inc,$<) -c -o $@ $<

$(BUILD)/%.o: %.cc
	@mkdir -p $(@D)
	@echo "  CXX     $<"
	$(Q)$(CXX) $(ALL_CXXFLAGS) $(call layer_inc,$<) -c -o $@ $<

$(PROTO_O): $(PROTO_C)
	@echo "  CC      $<"
	$(Q)$(CC) $(filter-out -Wshadow -Wmissing-prototypes,$(ALL_CFLAGS)) -I$(BUILD)/proto -c -o $@ $<

$(LIB_A): $(call obj,$(LIB_SRCS)) $(PROTO_O)
$(SOLVER_A): $(call obj,$(SOLVER_SRCS))
$(NODE_A): $(call obj,$(NODE_SRCS))
$(AGENT_A): $(call obj,$(AGENT_SRCS))
$(COORD_A): $(call obj,$(COORD_SRCS))
$(LIB_A) $(NODE_A) $(SOLVER_A) $(AGENT_A) $(COORD_A):
	@mkdir -p $(@D)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(AGENT_BIN): $(BUILD)/agent/main.o $(HTTP_NNG_O) $(AGENT_A) $(NODE_A) $(LIB_A)
$(COORD_BIN): $(BUILD)/coordinator/main.o $(HTTP_CURL_O) $(COORD_A) $(SOLVER_A) $(NODE_A) $(LIB_A)
$(CTL_BIN): $(call obj,$(CTL_SRCS)) $(HTTP_CURL_O) $(COORD_A) $(SOLVER_A) $(NODE_A) $(LIB_A)
$(AGENT_BIN) $(COORD_BIN) $(CTL_BIN):
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS)

# Unit tests: one binary per module, named test-<area>-<module>.c; the area picks what it links,
# and nothing more: lib (libcurl's HTTP backend, or NNG's for test-lib-http-nng), solver, node,
# agent (with node and NNG's HTTP), coord (the coordinator with solver and node, never the
# agent). Optional seams in tests/unit/test-X.wrap (one symbol a line, linked with -Wl,--wrap=).
TEST_LIBS_lib    := $(HTTP_CURL_O) $(LIB_A)
TEST_LIBS_libnng := $(HTTP_NNG_O) $(LIB_A)
TEST_LIBS_solver := $(SOLVER_A) $(LIB_A)
TEST_LIBS_node   := $(HTTP_NNG_O) $(NODE_A) $(LIB_A)
TEST_LIBS_agent  := $(HTTP_NNG_O) $(AGENT_A) $(NODE_A) $(LIB_A)
TEST_LIBS_coord  := $(HTTP_CURL_O) $(COORD_A) $(SOLVER_A) $(NODE_A) $(LIB_A)
test_area = $(if $(filter test-lib-http-nng,$(1)),libnng,$(word 2,$(subst -, ,$(1))))
test_libs = $(or $(TEST_LIBS_$(call test_area,$(1))),$(error $(1): unknown test area; name it test-{lib,solver,node,agent,coord}-MODULE))
.SECONDARY:
.SECONDEXPANSION:
$(BUILD)/unit/%: $(BUILD)/tests/unit/%.o $$(call test_libs,$$*)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< \
	  $(foreach s,$(shell cat tests/unit/$*.wrap 2>/dev/null),-Wl,--wrap=$(s)) \
	  $(call test_libs,$*) $(CMOCKA_LIBS) $(LIBS)

# The Kubernetes client on the agent's HTTP backend, for test_kube_client.py.
$(BUILD)/tools/kubeprobe-nng: $(BUILD)/tests/tools/kubeprobe.o $(HTTP_NNG_O) $(LIB_A)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tools/%: $(BUILD)/tests/tools/%.o $(ALL_LINK_LIBS)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(ALL_LINK_LIBS) $(LIBS)

# libFuzzer targets: build with clang into their own tree, e.g.
#   make BUILD=build/fuzz CC=clang SAN=1 FUZZ=1 fuzz
ifeq ($(FUZZ),1)
ALL_CFLAGS += -fsanitize=fuzzer-no-link
ALL_CXXFLAGS += -fsanitize=fuzzer-no-link
endif
# binaries are linked by the C driver, without UBSan's C++ runtime: no vptr checks
ifeq ($(SAN),1)
ALL_CXXFLAGS += -fno-sanitize=vptr
endif
$(BUILD)/fuzz/%: $(BUILD)/tests/fuzz/%.o $(ALL_LINK_LIBS)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -fsanitize=fuzzer -o $@ $< $(ALL_LINK_LIBS) $(LIBS)

# bench/footprint maps exactly the agent's libraries (nothing of nodesmith's).
$(BUILD)/benchbin/footprint: $(BUILD)/bench/footprint.o
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< -Wl,--no-as-needed -lnng -lmbedx509 -lmbedcrypto \
	  $(shell pkg-config --libs libsystemd libprotobuf-c libcjson yaml-0.1 2>/dev/null)

$(BUILD)/benchbin/%: $(BUILD)/bench/%.o $(ALL_LINK_LIBS)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(ALL_LINK_LIBS) $(LIBS)

# ---- the real Kubernetes control plane for tests and the demo ------------------------------
# tools/controlplane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler in one Go
# binary (docs/testing.md). Go's build cache does the incremental work; make rebuilds only when a
# source, go.mod/go.sum or the Go version (the stamp) changed. bootstrap/go.sh finds Go or says
# what to install. The first build takes several minutes (README.md).
CONTROLPLANE      := $(BUILD)/controlplane/controlplane
CONTROLPLANE_SRCS := $(wildcard tools/controlplane/*.go) tools/controlplane/go.mod tools/controlplane/go.sum

$(BUILD)/controlplane/go-version: FORCE
	@mkdir -p $(@D)
	$(Q)go=$$(bash bootstrap/go.sh) && v=$$(GOTOOLCHAIN=local $$go env GOVERSION) && \
	  { [ "$$(cat $@ 2>/dev/null)" = "$$go $$v" ] || echo "$$go $$v" > $@; }

$(CONTROLPLANE): $(CONTROLPLANE_SRCS) $(BUILD)/controlplane/go-version
	@echo "  GO      $@ (tools/controlplane; the first build takes minutes)"
	$(Q)cd tools/controlplane && GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
	  $$(cut -d' ' -f1 $(abspath $(BUILD))/controlplane/go-version) build -trimpath \
	  -o $(abspath $@).tmp . && mv -f $(abspath $@).tmp $(abspath $@)

controlplane: $(CONTROLPLANE)

.PHONY: FORCE controlplane
FORCE:


# Tools built from the Go module proxy, pinned by their go.mod/go.sum: helm (tools/helm) for the
# chart's tests. Rebuilt when the pins or the Go version (the controlplane's stamp) change.
HELM := $(BUILD)/tools/helm
$(HELM): tools/helm/go.mod tools/helm/go.sum $(BUILD)/controlplane/go-version
	@mkdir -p $(@D)
	@echo "  GO      helm.sh/helm/v3/cmd/helm"
	$(Q)cd tools/helm && GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
	  $$(cut -d' ' -f1 $(abspath $(BUILD))/controlplane/go-version) build -trimpath \
	  -o $(abspath $@).tmp helm.sh/helm/v3/cmd/helm && mv -f $(abspath $@).tmp $(abspath $@)
helm: $(HELM)

# ---- entry points --------------------------------------------------------------------------
# tests/integration/test_scheduling_pods_from.sh runs bench/scheduling
test: all $(UNIT_BINS) $(TOOL_BINS) $(FUZZ_OBJS) $(CONTROLPLANE) $(HELM) $(BUILD)/benchbin/scheduling
	$(Q)BUILD=$(BUILD) PYTHON=$(PYTHON) bash tests/run.sh

test-unit: $(UNIT_BINS)
	$(Q)BUILD=$(BUILD) bash tests/run.sh --unit

test-integration: all $(TOOL_BINS) $(CONTROLPLANE) $(HELM) $(BUILD)/benchbin/scheduling
	$(Q)BUILD=$(BUILD) PYTHON=$(PYTHON) bash tests/run.sh --integration

# Seeded chaos runs on the local stack, checked against invariants (docs/chaos.md): RUNS runs
# from seed SEED; CHAOS_ARGS passes more options to tests/chaos/chaos.py.
RUNS ?= 1
SEED ?= 1
chaos: all $(CONTROLPLANE)
	$(Q)BUILD=$(BUILD) PYTHON=$(PYTHON) $(PYTHON) tests/chaos/chaos.py --runs $(RUNS) --seed $(SEED) $(CHAOS_ARGS)

bench: all $(BENCH_BINS) $(CONTROLPLANE)
	$(Q)BUILD=$(BUILD) bash bench/run.sh

demo: all $(TOOL_BINS) $(CONTROLPLANE)
	$(Q)BUILD=$(BUILD) PYTHON=$(PYTHON) $(PYTHON) tests/demo/demo.py $(if $(SCENARIO),--scenario $(SCENARIO))

# Each fuzz target runs FUZZ_SECONDS (default 20) on its corpus in tests/fuzz/corpus/NAME;
# crashes are saved in $(BUILD)/fuzz/crashes and fail the run.
fuzz-build: $(FUZZ_BINS)
fuzz:
	$(Q)$(MAKE) --no-print-directory BUILD=build/fuzz CC=clang CXX=clang++ SAN=1 FUZZ=1 fuzz-build
	$(Q)BUILD=build/fuzz bash tests/fuzz/run.sh $(FUZZ_SECONDS)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(AGENT_BIN) $(COORD_BIN) $(CTL_BIN) $(DESTDIR)$(PREFIX)/bin/
	ln -sf nodesmithctl $(DESTDIR)$(PREFIX)/bin/kubectl-nodesmith

include packaging/packages.mk
include tools/aws.mk

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
