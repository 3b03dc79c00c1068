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
The CloudProviders the chart makes, as JSON: [{"object": NAME, "values": {...}, "field": "provider"}]:
the one of `provider`, named after the release, or one per entry of `providers`, each named
RELEASE-NAME (its provider's name). Setting both is an error naming the two.
*/}}
{{- define "wasm-ccm.providers" -}}
{{- $fullname := include "wasm-ccm.fullname" . -}}
{{- $list := list -}}
{{- if .Values.providers -}}
{{- if .Values.provider.ref -}}
{{- fail "set provider (one provider) or providers (several), not both: move provider's values into an entry of providers" -}}
{{- end -}}
{{- $names := list -}}
{{- $classes := list -}}
{{- range $i, $p := .Values.providers -}}
{{- $name := required (printf "providers[%d].name is required: the name the provider reports from init, e.g. simcloud" $i) $p.name -}}
{{- if has $name $names -}}
{{- fail (printf "providers[%d].name %s is the name of an earlier entry: each provider of a manager has its own name (its provider IDs' scheme)" $i $name) -}}
{{- end -}}
{{- $names = append $names $name -}}
{{- with $p.loadBalancerClass -}}
{{- if has . $classes -}}
{{- fail (printf "providers[%d].loadBalancerClass %s is an earlier entry's: two providers with one class would both serve its Services, so neither does" $i .) -}}
{{- end -}}
{{- $classes = append $classes . -}}
{{- end -}}
{{- $list = append $list (dict "object" (printf "%s-%s" $fullname $name) "values" $p "field" (printf "providers[%d]" $i)) -}}
{{- end -}}
{{- else -}}
{{- $list = append $list (dict "object" $fullname "values" .Values.provider "field" "provider") -}}
{{- end -}}
{{- toJson $list -}}
{{- end -}}

{{/* The names of the CloudProviders the chart makes, comma-separated. */}}
{{- define "wasm-ccm.providerObjects" -}}
{{- $objects := list -}}
{{- range (include "wasm-ccm.providers" . | fromJsonArray) -}}
{{- $objects = append $objects .object -}}
{{- end -}}
{{- join "," $objects -}}
{{- end -}}

{{/*
The ConfigMaps and Secrets the CloudProviders name, by namespace (the release namespace when a
reference has none), as JSON: {"NAMESPACE": {"secrets": [...], "configmaps": [...]}}. The Roles
let the manager read exactly these.
*/}}
{{- define "wasm-ccm.references" -}}
{{- $namespaces := dict -}}
{{- $release := .Release.Namespace -}}
{{- $refs := list -}}
{{- range $provider := (include "wasm-ccm.providers" . | fromJsonArray) -}}
{{- $p := $provider.values -}}
{{- range $p.credentials -}}
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
{{- range ($p.signature | default dict).keys -}}
{{- if .secretKeyRef -}}
{{- $refs = append $refs (dict "kind" "secrets" "ref" .secretKeyRef) -}}
{{- end -}}
{{- if .configMapKeyRef -}}
{{- $refs = append $refs (dict "kind" "configmaps" "ref" .configMapKeyRef) -}}
{{- end -}}
{{- end -}}
{{- with $p.cloudConfig -}}
{{- if .secretKeyRef -}}
{{- $refs = append $refs (dict "kind" "secrets" "ref" .secretKeyRef) -}}
{{- end -}}
{{- if .configMapKeyRef -}}
{{- $refs = append $refs (dict "kind" "configmaps" "ref" .configMapKeyRef) -}}
{{- end -}}
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
