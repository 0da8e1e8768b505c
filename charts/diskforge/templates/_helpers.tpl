{{/*
Object names are fixed (diskforge-controller, diskforge-node, ...), not prefixed with the release name: the
CSIDriver and the classes are cluster-wide, so a cluster holds one release of this chart, and the names match
deploy/kustomize's.
*/}}

{{/* The labels of every object of the chart (metadata only; selectors keep app.kubernetes.io/name). */}}
{{- define "diskforge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: diskforge
{{- end }}

{{/* image: (dict "image" .Values.x.image "default" TAG) -> repository:tag */}}
{{- define "diskforge.image" -}}
{{- $tag := .image.tag | default .default -}}
{{- if not $tag }}{{ fail (printf "image %s has no tag" .image.repository) }}{{ end -}}
{{- printf "%s:%s" .image.repository (toString $tag) -}}
{{- end }}

{{/* The container's image and pull policy: (dict "image" .Values.x.image "default" TAG). */}}
{{- define "diskforge.containerImage" -}}
image: {{ include "diskforge.image" . | quote }}
imagePullPolicy: {{ .image.pullPolicy | default "IfNotPresent" }}
{{- end }}

{{/* The driver's image: the chart's appVersion unless image.tag is set. */}}
{{- define "diskforge.driverImage" -}}
{{ include "diskforge.containerImage" (dict "image" .Values.image "default" .Chart.AppVersion) }}
{{- end }}

{{/* Whether the snapshot-controller add-on is deployed: snapshotController.enabled, or fakecloud.enabled when
unset. */}}
{{- define "diskforge.snapshotController.enabled" -}}
{{- $on := .Values.snapshotController.enabled -}}
{{- if kindIs "invalid" $on }}{{ $on = .Values.fakecloud.enabled }}{{ end -}}
{{- if $on }}true{{ end -}}
{{- end }}

{{/* Whether fakecloud registers the Nodes itself (--kube-nodes): fakecloud.kubeNodes.enabled, or
fakecloud.enabled when unset. */}}
{{- define "diskforge.fakecloud.kubeNodes" -}}
{{- $on := .Values.fakecloud.kubeNodes.enabled -}}
{{- if kindIs "invalid" $on }}{{ $on = true }}{{ end -}}
{{- if and .Values.fakecloud.enabled $on }}true{{ end -}}
{{- end }}

{{/* The node plugin's --node-identity-wait: node.identityWait, or 5m when fakecloud labels the Nodes; empty
for none. */}}
{{- define "diskforge.node.identityWait" -}}
{{- $v := .Values.node.identityWait -}}
{{- if kindIs "invalid" $v }}{{ if include "diskforge.fakecloud.kubeNodes" . }}5m{{ end }}{{ else if and $v (ne (toString $v) "0") (ne (toString $v) "0s") }}{{ $v }}{{ end -}}
{{- end }}

{{/* The node plugin's --loop-device-nodes: node.loopDeviceNodes, or 256 with fakecloud; empty for none. */}}
{{- define "diskforge.node.loopDeviceNodes" -}}
{{- $v := .Values.node.loopDeviceNodes -}}
{{- if kindIs "invalid" $v }}{{ if .Values.fakecloud.enabled }}256{{ end }}{{ else if gt (int $v) 0 }}{{ int $v }}{{ end -}}
{{- end }}

{{/* Whether the chart creates the credentials Secret. */}}
{{- define "diskforge.credentials.create" -}}
{{- if or .Values.fakecloud.enabled .Values.cloud.credentials.create }}true{{ end -}}
{{- end }}

{{/* fakecloud's URL inside the cluster (its Service). */}}
{{- define "diskforge.fakecloud.url" -}}
http://fakecloud.{{ .Release.Namespace }}.svc:{{ .Values.fakecloud.port }}
{{- end }}

{{/*
The driver's cloud flags, controller and node alike. With fakecloud: its Service, the region and the cluster ID
as flags (as overlays/kind). Otherwise from ConfigMap diskforge-cloud through the environment (as
overlays/provider): the kubelet expands $(VAR) in arguments.
*/}}
{{- define "diskforge.cloudArgs" -}}
{{- if .Values.fakecloud.enabled }}
- {{ printf "--cloud-endpoint=%s" (include "diskforge.fakecloud.url" .) | quote }}
- {{ printf "--region=%s" .Values.cloud.region | quote }}
{{- with .Values.cloud.clusterId }}
- {{ printf "--cluster-id=%s" . | quote }}
{{- end }}
{{- else }}
- --region=$(AWS_REGION)
- --cloud-endpoint=$(CLOUD_ENDPOINT)
- --cluster-id=$(CLUSTER_ID)
{{- end }}
{{- end }}

{{/* The driver's environment for the cloud: the credentials Secret (optional), and ConfigMap diskforge-cloud
without fakecloud. */}}
{{- define "diskforge.cloudEnv" -}}
# Cloud credentials for the SDK's default chain; without the Secret the chain goes on to the web identity
# token, the container credentials or the instance profile.
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.cloud.credentials.secretName }}
      key: key_id
      optional: true
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.cloud.credentials.secretName }}
      key: access_key
      optional: true
{{- if not .Values.fakecloud.enabled }}
{{- range $name, $key := dict "AWS_REGION" "region" "CLOUD_ENDPOINT" "endpoint" "CLUSTER_ID" "cluster-id" }}
- name: {{ $name }}
  valueFrom:
    configMapKeyRef:
      name: diskforge-cloud
      key: {{ $key }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod annotations of the driver's pods: a checksum of the cloud configuration, so that pods roll when it
changes, and the user's. (dict "root" $ "extra" .Values.x.podAnnotations) */}}
{{- define "diskforge.podAnnotations" -}}
{{- $cfg := include (print .root.Template.BasePath "/cloud-config.yaml") .root -}}
{{- $a := dict -}}
{{- if trim $cfg }}{{ $_ := set $a "checksum/cloud-config" ($cfg | sha256sum) }}{{ end -}}
{{- $a = merge $a (.extra | default dict) -}}
{{- with $a -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The flags every controller sidecar shares, after its own: leader election in the release namespace, the
metrics endpoint, the optional tuning flags, then extraArgs.
(dict "root" $ "s" .Values.sidecars.x "workersFlag" "worker-threads")
*/}}
{{- define "diskforge.sidecarArgs" -}}
{{- $le := .root.Values.sidecars.leaderElection -}}
{{- if $le.enabled }}
- --leader-election=true
- --leader-election-namespace={{ .root.Release.Namespace }}
{{- else if gt (int .root.Values.controller.replicas) 1 }}
{{- fail "sidecars.leaderElection.enabled=false needs controller.replicas=1" }}
{{- end }}
- --http-endpoint=:{{ .s.metricsPort }}
{{- if $le.enabled }}
{{- with $le.leaseDuration }}
- {{ printf "--leader-election-lease-duration=%v" . | quote }}
{{- end }}
{{- with $le.renewDeadline }}
- {{ printf "--leader-election-renew-deadline=%v" . | quote }}
{{- end }}
{{- with $le.retryPeriod }}
- {{ printf "--leader-election-retry-period=%v" . | quote }}
{{- end }}
{{- end }}
{{- with .s.workerThreads }}
- {{ printf "--%s=%v" $.workersFlag . | quote }}
{{- end }}
{{- with .s.retryIntervalStart }}
- {{ printf "--retry-interval-start=%v" . | quote }}
{{- end }}
{{- with .s.retryIntervalMax }}
- {{ printf "--retry-interval-max=%v" . | quote }}
{{- end }}
{{- with .s.kubeAPIQPS }}
- {{ printf "--kube-api-qps=%v" . | quote }}
{{- end }}
{{- with .s.kubeAPIBurst }}
- {{ printf "--kube-api-burst=%v" . | quote }}
{{- end }}
{{- with .s.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The hardening of every container but the node plugin's driver. */}}
{{- define "diskforge.restrictedContainer" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end }}

{{/* A sidecar's /healthz/leader-election liveness probe on its named metrics port. */}}
{{- define "diskforge.leaderElectionProbe" -}}
livenessProbe:
  httpGet:
    path: /healthz/leader-election
    port: {{ . }}
  periodSeconds: 20
  timeoutSeconds: 10
  failureThreshold: 1
{{- end }}

{{/* A class's parameters as strings (the API takes no numbers there), then the extra tags as
tagSpecification_extra_N: key=value, in key order. (dict "root" $ "params" .parameters) */}}
{{- define "diskforge.classParams" -}}
{{- range $k, $v := .params }}
{{ $k | quote }}: {{ $v | toString | quote }}
{{- end }}
{{- $tags := .root.Values.extraVolumeTags }}
{{- range $i, $k := keys $tags | sortAlpha }}
{{ printf "tagSpecification_extra_%d" (add1 $i) }}: {{ printf "%s=%v" $k (get $tags $k) | quote }}
{{- end }}
{{- end }}

{{/* The livenessprobe container, controller and node alike: /healthz on 9808 calls the driver's Probe over the
socket. (dict "s" .Values.sidecars.livenessProbe "volume" SOCKET-VOLUME) */}}
{{- define "diskforge.livenessProbeContainer" -}}
- name: liveness-probe
  {{- include "diskforge.containerImage" (dict "image" .s.image) | nindent 2 }}
  args:
    - --csi-address=/csi/csi.sock
    - --probe-timeout={{ .s.probeTimeout }}
    - --http-endpoint=:9808
    {{- with .s.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- include "diskforge.restrictedContainer" . | nindent 2 }}
  volumeMounts:
    - name: {{ .volume }}
      mountPath: /csi
  {{- with .s.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
