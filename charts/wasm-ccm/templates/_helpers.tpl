{{/* The chart name, or nameOverride. */}}
{{- define "wasm-ccm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The name of every object: fullnameOverride, or RELEASE-CHART (RELEASE when it holds the chart name). */}}
{{- define "wasm-ccm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "wasm-ccm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "wasm-ccm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wasm-ccm.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "wasm-ccm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: cloud-controller-manager
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "wasm-ccm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "wasm-ccm.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "wasm-ccm.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Leader election is on with several replicas and always for a DaemonSet. */}}
{{- define "wasm-ccm.leaderElect" -}}
{{- if or (eq .Values.kind "DaemonSet") (gt (int .Values.replicas) 1) -}}true{{- else -}}false{{- end -}}
{{- end -}}

{{/*
The ConfigMaps and Secrets the CloudProvider names, by namespace (the release namespace when a
reference has none), as JSON: {"NAMESPACE": {"secrets": [...], "configmaps": [...]}}. The Roles
let the manager read exactly these.
*/}}
{{- define "wasm-ccm.references" -}}
{{- $namespaces := dict -}}
{{- $release := .Release.Namespace -}}
{{- $refs := list -}}
{{- range .Values.provider.credentials -}}
{{- if .secretKeyRef -}}
{{- $refs = append $refs (dict "kind" "secrets" "ref" .secretKeyRef) -}}
{{- end -}}
{{- $aws := .aws | default dict -}}
{{- range $field := list "accessKeyIdRef" "secretAccessKeyRef" "sessionTokenRef" -}}
{{- with get $aws $field -}}
{{- $refs = append $refs (dict "kind" "secrets" "ref" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range (.Values.provider.signature | default dict).keys -}}
{{- if .secretKeyRef -}}
{{- $refs = append $refs (dict "kind" "secrets" "ref" .secretKeyRef) -}}
{{- end -}}
{{- if .configMapKeyRef -}}
{{- $refs = append $refs (dict "kind" "configmaps" "ref" .configMapKeyRef) -}}
{{- end -}}
{{- end -}}
{{- with .Values.provider.cloudConfig -}}
{{- if .secretKeyRef -}}
{{- $refs = append $refs (dict "kind" "secrets" "ref" .secretKeyRef) -}}
{{- end -}}
{{- if .configMapKeyRef -}}
{{- $refs = append $refs (dict "kind" "configmaps" "ref" .configMapKeyRef) -}}
{{- end -}}
{{- end -}}
{{- range $refs -}}
{{- $ns := default $release .ref.namespace -}}
{{- $entry := get $namespaces $ns | default (dict "secrets" list "configmaps" list) -}}
{{- $names := get $entry .kind -}}
{{- if not (has .ref.name $names) -}}
{{- $_ := set $entry .kind (append $names .ref.name) -}}
{{- end -}}
{{- $_ := set $namespaces $ns $entry -}}
{{- end -}}
{{- toJson $namespaces -}}
{{- end -}}
