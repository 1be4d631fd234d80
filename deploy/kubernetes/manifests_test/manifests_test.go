// Package manifests_test checks deploy/kubernetes: every manifest decodes strictly into the
// Kubernetes API types (an unknown or misspelt field fails), every kustomization lists the
// files beside it, the ConfigMap's config passes `cronlock validate`, and the Deployment agrees
// with that config: probes on its http: port, the grace period longer than the drain plus the
// kill grace, the secrets' variables set.
package manifests_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// dir is deploy/kubernetes.
const dir = ".."

// kustomization is the part of kustomize's Kustomization that the manifests use.
type kustomization struct {
	metav1.TypeMeta `json:",inline"`
	Labels          []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// types are the kinds the manifests may hold, by apiVersion/kind.
var types = map[string]func() any{
	"v1/ConfigMap":                  func() any { return new(corev1.ConfigMap) },
	"v1/Service":                    func() any { return new(corev1.Service) },
	"apps/v1/Deployment":            func() any { return new(appsv1.Deployment) },
	"apps/v1/StatefulSet":           func() any { return new(appsv1.StatefulSet) },
	"policy/v1/PodDisruptionBudget": func() any { return new(policyv1.PodDisruptionBudget) },
}

// manifests decodes every manifest under dir (but kustomization.yaml files), by file.
func manifests(t *testing.T) map[string][]any {
	t.Helper()
	out := map[string][]any{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" || d.Name() == "kustomization.yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			obj, err := decode(doc)
			if err != nil {
				t.Errorf("%s, document %d: %v", path, i+1, err)
				continue
			}
			out[path] = append(out[path], obj)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decode decodes one document strictly into its Kubernetes type.
func decode(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	newObj, ok := types[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind this test knows (add it to types)", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

func TestManifestsDecodeStrictly(t *testing.T) {
	if n := len(manifests(t)); n < 6 {
		t.Fatalf("%d manifest files under %s: the walk missed them", n, dir)
	}
}

// A misspelt field fails: the check above is strict.
func TestDecodeRefusesUnknownFields(t *testing.T) {
	_, err := decode([]byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 3\n"))
	if err == nil || !strings.Contains(err.Error(), "replica") {
		t.Fatalf("err = %v, want one naming the unknown field", err)
	}
}

// Each kustomization lists exactly the manifests beside it, and they exist.
func TestKustomizations(t *testing.T) {
	for _, k := range []string{".", "redis"} {
		kdir := filepath.Join(dir, k)
		b, err := os.ReadFile(filepath.Join(kdir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var kz kustomization
		if err := yaml.UnmarshalStrict(b, &kz); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", kdir, err)
		}
		if kz.Kind != "Kustomization" || kz.APIVersion != "kustomize.config.k8s.io/v1beta1" {
			t.Errorf("%s/kustomization.yaml: apiVersion %q kind %q", kdir, kz.APIVersion, kz.Kind)
		}
		files, err := filepath.Glob(filepath.Join(kdir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, f := range files {
			if filepath.Base(f) != "kustomization.yaml" {
				want = append(want, filepath.Base(f))
			}
		}
		got := slices.Sorted(slices.Values(kz.Resources))
		if !slices.Equal(got, want) {
			t.Errorf("%s/kustomization.yaml: resources %v, want the files beside it %v", kdir, got, want)
		}
	}
}

// daemonConfig is the part of cronlock's config that the Deployment must agree with.
type daemonConfig struct {
	Nodes []struct {
		PasswordEnv string `json:"password_env"`
	} `json:"nodes"`
	HTTP         string `json:"http"`
	HTTPTokenEnv string `json:"http_token_env"`
	KillGrace    string `json:"kill_grace"`
}

func TestDeploymentMatchesConfig(t *testing.T) {
	all := manifests(t)
	cm := only[*corev1.ConfigMap](t, all[filepath.Join(dir, "configmap.yaml")])
	dep := only[*appsv1.Deployment](t, all[filepath.Join(dir, "deployment.yaml")])
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]

	// The config file the daemon reads is the ConfigMap's, mounted where --config says.
	configPath := flagValue(t, c.Args, "--config")
	var mounted string
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				mounted = filepath.Join(m.MountPath, filepath.Base(configPath))
				if _, ok := cm.Data[filepath.Base(configPath)]; !ok {
					t.Errorf("ConfigMap %s has no key %s", cm.Name, filepath.Base(configPath))
				}
			}
		}
	}
	if mounted != configPath {
		t.Fatalf("--config %s is not the ConfigMap's file (mounted at %q)", configPath, mounted)
	}
	text := cm.Data[filepath.Base(configPath)]
	validate(t, text)
	var cfg daemonConfig
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}

	// Probes on the config's HTTP port.
	_, port, err := net.SplitHostPort(cfg.HTTP)
	if err != nil {
		t.Fatalf("config http: %q: %v", cfg.HTTP, err)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe on %s", p.name, p.path)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s: path %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
		if got := portNumber(c, p.probe.HTTPGet.Port.String()); got != port {
			t.Errorf("%s: port %s is %s, want the config's http: port %s", p.name, p.probe.HTTPGet.Port.String(), got, port)
		}
	}

	// SIGKILL comes after the drain and the kill grace.
	drain := duration(t, flagValue(t, c.Args, "--drain"))
	grace := 10 * time.Second // config.DefaultKillGrace
	if cfg.KillGrace != "" {
		grace = duration(t, cfg.KillGrace)
	}
	var period time.Duration
	if p := pod.TerminationGracePeriodSeconds; p != nil {
		period = time.Duration(*p) * time.Second
	}
	if period <= drain+grace {
		t.Errorf("terminationGracePeriodSeconds %v: want more than --drain %v + kill_grace %v", period, drain, grace)
	}

	// The config's secrets come from the Secret.
	for _, name := range append([]string{cfg.HTTPTokenEnv}, passwordEnvs(cfg)...) {
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil {
			t.Errorf("env %s: want it from a Secret (secretKeyRef)", name)
		}
	}

	// Three replicas on different nodes, non-root, read-only root filesystem.
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", dep.Spec.Replicas)
	}
	if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil {
		t.Error("no pod anti-affinity")
	}
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
		pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser == 0 {
		t.Error("the pod does not run as a non-root user (runAsNonRoot, runAsUser)")
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the container's root filesystem is not read-only")
	}
}

// The PodDisruptionBudget and the Service select the Deployment's pods.
func TestSelectors(t *testing.T) {
	all := manifests(t)
	dep := only[*appsv1.Deployment](t, all[filepath.Join(dir, "deployment.yaml")])
	labels := dep.Spec.Template.Labels
	pdb := only[*policyv1.PodDisruptionBudget](t, all[filepath.Join(dir, "poddisruptionbudget.yaml")])
	svc := only[*corev1.Service](t, all[filepath.Join(dir, "service.yaml")])
	for name, sel := range map[string]map[string]string{
		"Deployment": dep.Spec.Selector.MatchLabels, "PodDisruptionBudget": pdb.Spec.Selector.MatchLabels, "Service": svc.Spec.Selector,
	} {
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, which the pods do not have (%v)", name, k, v, labels)
			}
		}
	}
}

// Each example Redis node is a StatefulSet of one with its own volume.
func TestRedisNodes(t *testing.T) {
	all := manifests(t)
	var sets int
	for path, objs := range all {
		for _, o := range objs {
			if s, ok := o.(*appsv1.StatefulSet); ok {
				sets++
				if s.Spec.Replicas == nil || *s.Spec.Replicas != 1 || len(s.Spec.VolumeClaimTemplates) != 1 {
					t.Errorf("%s: StatefulSet %s: want 1 replica with a volume claim", path, s.Name)
				}
			}
		}
	}
	if sets != 3 {
		t.Errorf("%d StatefulSets, want 3 independent Redis nodes", sets)
	}
}

// validate runs the config through `cronlock validate`, built from this repository.
func validate(t *testing.T, config string) {
	t.Helper()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "cronlock")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cronlock")
	build.Dir = filepath.Join(dir, "..", "..")
	build.Env = append(os.Environ(), "GOWORK=") // the repository's own workspace
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cronlock: %v\n%s", err, out)
	}
	file := filepath.Join(tmp, "cronlock.yaml")
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "validate", "--config", file).CombinedOutput()
	if err != nil {
		t.Fatalf("cronlock validate refuses the ConfigMap's config: %v\n%s", err, out)
	}
	t.Logf("cronlock validate:\n%s", out)
}

func only[T any](t *testing.T, objs []any) T {
	t.Helper()
	if len(objs) != 1 {
		t.Fatalf("%d documents, want 1", len(objs))
	}
	o, ok := objs[0].(T)
	if !ok {
		t.Fatalf("a %T, want a %T", objs[0], o)
	}
	return o
}

func flagValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("args %q: no %s", args, flag)
	}
	return args[i+1]
}

// portNumber resolves a probe's port (a number or a container port's name) to a number.
func portNumber(c corev1.Container, port string) string {
	for _, p := range c.Ports {
		if p.Name == port {
			return strconv.Itoa(int(p.ContainerPort))
		}
	}
	return port
}

func duration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func passwordEnvs(cfg daemonConfig) []string {
	var names []string
	for _, n := range cfg.Nodes {
		if n.PasswordEnv != "" && !slices.Contains(names, n.PasswordEnv) {
			names = append(names, n.PasswordEnv)
		}
	}
	return names
}
