package nodeimage

import (
	"strings"
)

// containerdConfig is kind's containerd configuration (overlayfs, runc with the systemd cgroup driver the kubelet
// uses, the sandbox image pinned) in containerd v2's format, and oom_score_adj restricted: runc cannot write a
// score below containerd's own where the node lacks CAP_SYS_RESOURCE, and every sandbox would fail. kind's
// entrypoint edits `snapshotter = "overlayfs"` for rootless nodes: the line keeps kind's spelling.
const containerdConfig = `# The kind node's containerd (tools/kindnode): kind's settings, in containerd v2's config format.
version = 3

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  discard_unpacked_layers = true
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '` + PauseImage + `'

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = true
        BinaryName = '/usr/sbin/runc'
`

// containerdUnit is kind's containerd unit without its resource limits (LimitNOFILE=infinity and friends, and
// OOMScoreAdjust): setting them needs CAP_SYS_RESOURCE, and without it systemd fails the unit.
const containerdUnit = `# kind's containerd unit (images/base), without the limits a node lacking CAP_SYS_RESOURCE cannot set.
[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target local-fs.target
StartLimitIntervalSec=0

[Service]
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=1
TasksMax=infinity

[Install]
WantedBy=multi-user.target
`

// imagesUnit imports the node image's container images into containerd before the kubelet first starts.
const imagesUnit = `# The node image's container images (/kind/images), into containerd before the kubelet starts.
[Unit]
Description=Import the node image's container images
After=containerd.service
Requires=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/kind/bin/import-images.sh

[Install]
WantedBy=multi-user.target
`

// kubeletAfterImages holds the kubelet back until the images are in containerd: kubeadm starts it as soon as
// its config is written, and a static pod whose image is missing would wait out an image pull back-off.
const kubeletAfterImages = `[Unit]
After=kind-images.service
Requires=kind-images.service
`

// importImagesScript imports every tarball as kind's node image build does (not unpacked: containerd unpacks
// an image when a container first needs it; pinned: the kubelet's image garbage collection keeps it).
const importImagesScript = `#!/bin/sh
set -eu
for image in /kind/images/*.tar; do
	ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests \
		--label=io.cri-containerd.pinned=pinned "$image"
done
`

// cniManifest is what kind applies as the cluster's CNI: nodenet, a DaemonSet that writes each node's CNI
// configuration (bridge and host-local on the node's pod CIDR) and routes the other nodes' pod CIDRs through
// their addresses. kind fills in {{ .PodSubnet }} and adds CONTROL_PLANE_ENDPOINT to the first container's
// environment, as it does for kindnetd (the two "would you kindly" lines ask for that).
const cniManifest = `# nodenet, the pod network of the offline kind node image (tools/kindnode), in kindnetd's place.
# would you kindly template this file
# would you kindly patch this file
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: nodenet
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: nodenet
rules:
  # Every node's pod CIDR and address.
  - apiGroups: [""]
    resources: [nodes]
    verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: nodenet
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: nodenet
subjects:
  - kind: ServiceAccount
    name: nodenet
    namespace: kube-system
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nodenet
  namespace: kube-system
  labels:
    app: nodenet
spec:
  selector:
    matchLabels:
      app: nodenet
  template:
    metadata:
      labels:
        app: nodenet
    spec:
      hostNetwork: true
      priorityClassName: system-node-critical
      serviceAccountName: nodenet
      tolerations:
        - operator: Exists
      containers:
        - name: nodenet
          image: ` + NodenetImage + `
          imagePullPolicy: IfNotPresent
          env:
            - name: NODE_NAME
              valueFrom:
                fieldRef:
                  fieldPath: spec.nodeName
            - name: POD_SUBNET
              value: "{{ .PodSubnet }}"
          securityContext:
            capabilities:
              add: [NET_ADMIN]
          resources:
            requests:
              cpu: 10m
              memory: 16Mi
          volumeMounts:
            - name: cni-cfg
              mountPath: /etc/cni/net.d
      volumes:
        - name: cni-cfg
          hostPath:
            path: /etc/cni/net.d
            type: DirectoryOrCreate
`

// CNIManifest returns the CNI manifest kind reads from /kind/manifests/default-cni.yaml.
func CNIManifest() string {
	return strings.TrimLeft(cniManifest, "\n")
}
