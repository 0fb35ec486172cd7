package k8senv

import (
	"os"
	"strings"
	"testing"

	"github.com/diskprobe/diskprobe_exporter/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestClusterComesUpAndRunsAPod brings the cluster up and runs a pod of the pause image on
// the tainted control-plane node, on the pod network.
func TestClusterComesUpAndRunsAPod(t *testing.T) {
	testenv.RequireRoot(t)
	c := Get(t, testenv.ToolDir(t, "k8s"))
	taints := c.Kubectl(t, "get", "node", c.Node, "-o", "jsonpath={.spec.taints[*].key}")
	if !strings.Contains(taints, "node-role.kubernetes.io/control-plane") {
		t.Errorf("node taints %q", taints)
	}
	c.Kubectl(t, "run", "p", "--image="+PauseImage, "--image-pull-policy=Never",
		`--overrides={"spec":{"tolerations":[{"operator":"Exists"}]}}`)
	out, err := c.KubectlErr("wait", "--for=condition=Ready", "pod/p", "--timeout=120s")
	if err != nil {
		t.Fatalf("%v\n%s\n%s\n%s", err, out, c.Kubectl(t, "describe", "pod", "p"), c.Logs(30))
	}
	ip := c.Kubectl(t, "get", "pod", "p", "-o", "jsonpath={.status.podIP}")
	t.Logf("pod IP %s", ip)
	c.Kubectl(t, "delete", "pod", "p", "--wait=true")
}
