# AWS's own components that the integration tests run for real (docs/testing-aws.md), each built
# from the published Go module pinned in its tools/*/go.mod and go.sum; nothing else downloaded.
#   $(BUILD)/ec2-metadata-mock/ec2-metadata-mock     github.com/aws/amazon-ec2-metadata-mock v1.13.0
#   $(BUILD)/ccm-aws/aws-cloud-controller-manager    k8s.io/cloud-provider-aws v1.37.1
# Each binary is its own stamp: rebuilt when its go.mod or go.sum, or the Go toolchain (the
# control plane's stamp, found by bootstrap/go.sh), changes. Go's build cache makes a rebuild
# after `make clean` mostly linking. `make aws-tools` builds both; make test needs them.
AEMM_BIN    := $(BUILD)/ec2-metadata-mock/ec2-metadata-mock
CCM_AWS_BIN := $(BUILD)/ccm-aws/aws-cloud-controller-manager

# go_tool(module dir, package, output)
define go_tool
	@mkdir -p $(dir $(3))
	@echo "  GO      $(3) ($(2))"
	$(Q)cd $(1) && GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
	  $$(cut -d' ' -f1 $(abspath $(BUILD))/controlplane/go-version) build -trimpath \
	  -o $(abspath $(3)).tmp $(2) && mv -f $(abspath $(3)).tmp $(abspath $(3))
endef

$(AEMM_BIN): tools/ec2-metadata-mock/go.mod tools/ec2-metadata-mock/go.sum $(BUILD)/controlplane/go-version
	$(call go_tool,tools/ec2-metadata-mock,github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock,$@)

$(CCM_AWS_BIN): tools/ccm-aws/go.mod tools/ccm-aws/go.sum $(BUILD)/controlplane/go-version
	$(call go_tool,tools/ccm-aws,k8s.io/cloud-provider-aws/cmd/aws-cloud-controller-manager,$@)

.PHONY: aws-tools
aws-tools: $(AEMM_BIN) $(CCM_AWS_BIN)
test test-integration: aws-tools
