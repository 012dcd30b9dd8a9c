module nodesmith.io/bench/karpenter

go 1.26.6

require sigs.k8s.io/karpenter v1.14.1
