{{- define "floodway.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "floodway.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "floodway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floodway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "floodway.labels" -}}
{{ include "floodway.selectorLabels" . }}
app.kubernetes.io/part-of: floodway
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "floodway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "floodway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "floodway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "floodway.engineImage" -}}
{{- printf "%s:%s" .Values.engineImage.repository (default .Chart.AppVersion .Values.engineImage.tag) -}}
{{- end -}}

{{- define "floodway.gatewayImage" -}}
{{- printf "%s:%s" (default .Values.image.repository .Values.gatewayImage.repository) (default (default .Chart.AppVersion .Values.image.tag) .Values.gatewayImage.tag) -}}
{{- end -}}

{{/* The namespaces the operator manages, one per line: watchNamespaces, else the release namespace; none
     when clusterWide (it then watches all of them through a ClusterRole). */}}
{{- define "floodway.watchNamespaces" -}}
{{- if .Values.clusterWide -}}
{{- if .Values.watchNamespaces -}}
{{- fail "clusterWide: true manages every namespace; leave watchNamespaces empty" -}}
{{- end -}}
{{- else -}}
{{- join "\n" (default (list .Release.Namespace) .Values.watchNamespaces) -}}
{{- end -}}
{{- end -}}

{{/* The operator's permissions: only the kinds it renders, plus reading pods/endpoints for scraping.
     No Secrets: pods receive the overflow key through secretKeyRef, which needs no operator access. */}}
{{- define "floodway.rules" -}}
- apiGroups: ["serving.floodway.io"]
  resources: ["inferenceservices"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["serving.floodway.io"]
  resources: ["inferenceservices/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: [""]
  resources: ["pods", "persistentvolumeclaims"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}
