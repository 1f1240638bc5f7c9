{{/* Common labels of every object of the release. */}}
{{- define "casestream.labels" -}}
app.kubernetes.io/name: casestream
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The Secret mounted at /run/secrets/casestream. */}}
{{- define "casestream.secretName" -}}
{{- .Values.existingSecret | default (printf "%s-secrets" .Release.Name) -}}
{{- end }}

{{/* Most replicas of a consuming service: one group member per partition at least
     (partitions / (workers x consumer concurrency)), and the service's own cap when lower. */}}
{{- define "casestream.maxReplicas" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}
{{- $workers := int (default 1 $root.Values.workers) -}}
{{- $members := mul $workers (int $root.Values.consumerConcurrency) -}}
{{- $cap := div (int $root.Values.kafka.partitions) $members -}}
{{- if lt (int $cap) 1 -}}{{- fail "kafka.partitions must be >= workers x consumerConcurrency" -}}{{- end -}}
{{- $own := int (default $cap $svc.maxReplicas) -}}
{{- if gt $own (int $cap) -}}
{{- if eq $workers 1 -}}
{{- fail (printf "maxReplicas %d exceeds partitions/consumerConcurrency = %d: extra members would get no partition" $own (int $cap)) -}}
{{- else -}}
{{- fail (printf "maxReplicas %d exceeds partitions/(workers x consumerConcurrency) = %d: extra members would get no partition" $own (int $cap)) -}}
{{- end -}}
{{- end -}}
{{- $own -}}
{{- end }}

{{/* Environment shared by the services and the migration Job. */}}
{{- define "casestream.env" -}}
- name: CASESTREAM_ENV
  value: {{ .Values.environment | quote }}
- name: CASESTREAM_TRANSPORT_SECURITY
  value: {{ .Values.transportSecurity | quote }}
- name: CASESTREAM_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: CASESTREAM_AUTO_REGISTER_SCHEMAS
  value: "false"
- name: CASESTREAM_KAFKA_BOOTSTRAP
  value: {{ .Values.kafka.bootstrap | quote }}
{{- range $k, $v := .Values.kafka.properties }}
- name: {{ printf "CASESTREAM_KAFKA_PROP_%s" ($k | upper | replace "." "_") }}
  value: {{ $v | quote }}
{{- end }}
{{- if .Values.kafka.sasl.enabled }}
- name: CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE
  value: /run/secrets/casestream/kafka-password
{{- end }}
- name: CASESTREAM_REGISTRY_URL
  value: {{ .Values.registry.url | quote }}
{{- range $k, $v := .Values.registry.properties }}
- name: {{ printf "CASESTREAM_REGISTRY_PROP_%s" ($k | upper | replace "." "_") }}
  value: {{ $v | quote }}
{{- end }}
{{- if .Values.registry.basicAuth }}
- name: CASESTREAM_REGISTRY_PROP_BASIC_AUTH_USER_INFO_FILE
  value: /run/secrets/casestream/registry-user-info
{{- end }}
- name: CASESTREAM_PG_URL
  value: {{ .Values.postgres.url | quote }}
- name: CASESTREAM_PG_PASSWORD_FILE
  value: /run/secrets/casestream/pg-password
- name: CASESTREAM_AUTH_JWT_ALGORITHM
  value: {{ .Values.auth.algorithm | quote }}
- name: CASESTREAM_AUTH_JWT_ISSUER
  value: {{ .Values.auth.issuer | quote }}
- name: CASESTREAM_AUTH_JWT_AUDIENCE
  value: {{ .Values.auth.audience | quote }}
{{- if .Values.auth.jwksUrl }}
- name: CASESTREAM_AUTH_JWKS_URL
  value: {{ .Values.auth.jwksUrl | quote }}
{{- else }}
- name: CASESTREAM_AUTH_JWT_KEY_FILE
  value: /run/secrets/casestream/jwt-key
{{- end }}
- name: CASESTREAM_CONSUMER_CONCURRENCY
  value: {{ .Values.consumerConcurrency | quote }}
- name: CASESTREAM_WORKERS
  value: {{ default 1 .Values.workers | quote }}
{{- end }}

{{/* "true" when a `services` entry is deployed: present (not null) and not `enabled: false`. */}}
{{- define "casestream.enabled" -}}
{{- if and . (ne (toString .enabled) "false") -}}true{{- end -}}
{{- end }}

{{/* Refuse a release without a service, or a service without its module or port: the chart
     deploys exactly the services named in values (it names none by default). */}}
{{- define "casestream.requireServices" -}}
{{- $n := 0 -}}
{{- range $name, $svc := .Values.services -}}
{{- if include "casestream.enabled" $svc -}}
{{- $n = add1 $n -}}
{{- if not $svc.module -}}{{- fail (printf "services.%s.module is required: the Python module its image runs (python -m MODULE)" $name) -}}{{- end -}}
{{- if not $svc.port -}}{{- fail (printf "services.%s.port is required: the HTTP port it listens on" $name) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if eq $n 0 -}}
{{- fail "services: no service to deploy; name each one under services (module, port, consumers), e.g. -f deploy/helm/suite-values.yaml" -}}
{{- end -}}
{{- end }}

{{/* A service's image: `image` with the service's own `image.repository`/`image.tag` laid over it. */}}
{{- define "casestream.image" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}
{{- $image := mergeOverwrite (deepCopy $root.Values.image) (default dict $svc.image) -}}
{{- printf "%s:%s" $image.repository (toString $image.tag) -}}
{{- end }}

{{/* A service's image tag (its own `image.tag` laid over `image.tag`). */}}
{{- define "casestream.imageTag" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}
{{- toString (mergeOverwrite (deepCopy $root.Values.image) (default dict $svc.image)).tag -}}
{{- end }}

{{/* A service's environment (its Deployment and its migrate Job): the common one, where the
     service's own `env` replaces a variable of the same name, then the rest of its `env`. */}}
{{- define "casestream.serviceEnv" -}}
{{- $root := index . 0 -}}{{- $own := (index . 1).env | default dict -}}
{{- range (include "casestream.env" $root | fromYamlArray) }}
{{- if not (hasKey $own .name) }}
- name: {{ .name }}
  value: {{ .value | quote }}
{{- end }}
{{- end }}
{{- range $k, $v := $own }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end }}
