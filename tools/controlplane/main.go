// controlplane: the real Kubernetes control plane for nodesmith's tests and demo, built from the
// published Go modules. One binary that dispatches on its first argument (or on the name it was
// called by), so the three Kubernetes components and etcd link once:
//
//	controlplane etcd ...                     (go.etcd.io/etcd/server/v3)
//	controlplane kube-apiserver ...           (k8s.io/kubernetes/cmd/kube-apiserver)
//	controlplane kube-controller-manager ...  (k8s.io/kubernetes/cmd/kube-controller-manager)
//	controlplane kube-scheduler ...           (k8s.io/kubernetes/cmd/kube-scheduler)
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args
	if name == "controlplane" {
		if len(os.Args) < 2 {
			fmt.Fprintln(os.Stderr, "usage: controlplane etcd|kube-apiserver|kube-controller-manager|kube-scheduler [flags]")
			os.Exit(2)
		}
		name = os.Args[1]
		args = os.Args[1:]
	}
	switch name {
	case "etcd":
		etcdmain.Main(args)
	case "kube-apiserver":
		os.Args = args
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Args = args
		os.Exit(cli.Run(kcm.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Args = args
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	default:
		fmt.Fprintf(os.Stderr, "controlplane: unknown component %q\n", name)
		os.Exit(2)
	}
}
