# AWS's own components that the integration tests run for real (docs/testing-aws.md), each built
# from the published Go module pinned in its tools/*/go.mod and go.sum; nothing else downloaded.
#   $(BUILD)/ec2-metadata-mock/ec2-metadata-mock     github.com/aws/amazon-ec2-metadata-mock v1.13.0
#   $(BUILD)/ccm-aws/aws-cloud-controller-manager    k8s.io/cloud-provider-aws v1.37.1
# Each binary is its own stamp: rebuilt only when its go.mod or go.sum changes (or it is missing);
# Go's build cache makes a rebuild after `make clean` cheap. `make aws-tools` builds both.
GO ?= $(or $(shell command -v go 2>/dev/null),/usr/local/go/bin/go)
GO_TOOL_FLAGS := -mod=readonly -trimpath -buildvcs=false

AEMM_BIN    := $(BUILD)/ec2-metadata-mock/ec2-metadata-mock
CCM_AWS_BIN := $(BUILD)/ccm-aws/aws-cloud-controller-manager

# go_tool(module dir, package, output)
define go_tool
	@mkdir -p $(dir $(3))
	@echo "  GO      $(3)"
	$(Q)cd $(1) && $(GO) build $(GO_TOOL_FLAGS) -o $(abspath $(3)).tmp $(2) && mv -f $(abspath $(3)).tmp $(abspath $(3))
endef

$(AEMM_BIN): tools/ec2-metadata-mock/go.mod tools/ec2-metadata-mock/go.sum
	$(call go_tool,tools/ec2-metadata-mock,github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock,$@)

$(CCM_AWS_BIN): tools/ccm-aws/go.mod tools/ccm-aws/go.sum
	$(call go_tool,tools/ccm-aws,k8s.io/cloud-provider-aws/cmd/aws-cloud-controller-manager,$@)

.PHONY: aws-tools
aws-tools: $(AEMM_BIN) $(CCM_AWS_BIN)
test test-integration: aws-tools
