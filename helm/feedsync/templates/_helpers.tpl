{{/* Names, labels and the pieces every feedsync pod shares. */}}

{{- define "feedsync.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "feedsync.fullname" -}}
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

{{- define "feedsync.selectorLabels" -}}
app.kubernetes.io/name: {{ include "feedsync.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "feedsync.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "feedsync.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "feedsync.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "feedsync.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "feedsync.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "feedsync.secretsDir" -}}/etc/feedsync/secrets{{- end -}}

{{/* Redis is needed (and mounted) only in scaled mode. The chart stores the URL in its own
     Secret when the user gives it (redis.url) or the chart builds it (redis.sentinel /
     redis.cluster); with redis.existingSecret the user's Secret holds the whole URL. */}}
{{- define "feedsync.redisManagedByChart" -}}
{{- if and (eq .Values.mode "scaled") (not .Values.redis.existingSecret) (or .Values.redis.url .Values.redis.sentinel.sentinels .Values.redis.cluster.nodes) -}}true{{- end -}}
{{- end -}}

{{/* Percent-encodes a URL part (userinfo, master name): urlquery is QueryEscape, whose "+" for a
     space is a literal "+" outside a query string. */}}
{{- define "feedsync.urlEncode" -}}
{{- urlquery . | replace "+" "%20" -}}
{{- end -}}

{{/* `[user[:password]@]` for a URL the chart builds, from redis.username / redis.password. */}}
{{- define "feedsync.redisUserinfo" -}}
{{- $r := .Values.redis -}}
{{- if or $r.username $r.password -}}
{{- include "feedsync.urlEncode" (default "" $r.username) -}}
{{- with $r.password -}}:{{ include "feedsync.urlEncode" . }}{{- end -}}@
{{- end -}}
{{- end -}}

{{/* The Redis URL stored in the chart's Secret: redis.url as given, or built from
     redis.sentinel / redis.cluster (rediss+… when redis.tls.enabled). */}}
{{- define "feedsync.redisUrl" -}}
{{- $r := .Values.redis -}}
{{- if $r.url -}}
{{- $r.url -}}
{{- else if $r.sentinel.sentinels -}}
{{- printf "%s://%s%s/%s" (ternary "rediss+sentinel" "redis+sentinel" (eq $r.tls.enabled true)) (include "feedsync.redisUserinfo" .) (join "," $r.sentinel.sentinels) (include "feedsync.urlEncode" $r.sentinel.masterName) -}}
{{- else if $r.cluster.nodes -}}
{{- printf "%s://%s%s" (ternary "rediss+cluster" "redis+cluster" (eq $r.tls.enabled true)) (include "feedsync.redisUserinfo" .) (join "," $r.cluster.nodes) -}}
{{- end -}}
{{- end -}}

{{- define "feedsync.adminDir" -}}/etc/feedsync/admin{{- end -}}

{{- define "feedsync.redisTlsDir" -}}/etc/feedsync/redis-tls{{- end -}}

{{/* The files of redis.tls.existingSecret the pods mount: key in the Secret -> file name. */}}
{{- define "feedsync.redisTlsItems" -}}
{{- $tls := .Values.redis.tls -}}
{{- $items := list -}}
{{- if and (eq .Values.mode "scaled") $tls.enabled $tls.existingSecret -}}
{{- if $tls.caKey -}}{{- $items = append $items (dict "key" $tls.caKey "path" "ca.crt") -}}{{- end -}}
{{- if $tls.certKey -}}{{- $items = append $items (dict "key" $tls.certKey "path" "tls.crt") -}}{{- end -}}
{{- if $tls.keyKey -}}{{- $items = append $items (dict "key" $tls.keyKey "path" "tls.key") -}}{{- end -}}
{{- end -}}
{{- if $items -}}{{- toYaml $items -}}{{- end -}}
{{- end -}}

{{/* The chart renders its own Secret when it holds any credential. */}}
{{- define "feedsync.chartSecretNeeded" -}}
{{- if or (and (not .Values.secrets.existingSecret) .Values.secrets.values) (include "feedsync.redisManagedByChart" .) -}}true{{- end -}}
{{- end -}}

{{- define "feedsync.shutdownTimeoutMs" -}}
{{- .Values.config.shutdown_timeout_ms | default 10000 | int64 -}}
{{- end -}}

{{/* Kubernetes must wait longer than feedsync's own graceful-stop budget, or SIGKILL cuts a
     clean shutdown short (in-flight work is then redelivered, not lost, but needlessly). */}}
{{- define "feedsync.terminationGracePeriodSeconds" -}}
{{- $budget := div (int64 (include "feedsync.shutdownTimeoutMs" .)) 1000 -}}
{{- $explicit := int64 .Values.terminationGracePeriodSeconds -}}
{{- if eq $explicit 0 -}}
{{- add $budget 5 -}}
{{- else if le $explicit $budget -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed config.shutdown_timeout_ms/1000 (%d)" $explicit $budget) -}}
{{- else -}}
{{- $explicit -}}
{{- end -}}
{{- end -}}

{{/* Checks that cannot be expressed in values.schema.json; runs from the ConfigMap template
     so every render goes through it. */}}
{{- define "feedsync.validate" -}}
{{- if eq .Values.mode "scaled" -}}
{{- include "feedsync.validateRedis" . -}}
{{- end -}}
{{- if and .Values.secrets.existingSecret .Values.secrets.values -}}
{{- fail "set either secrets.existingSecret or secrets.values, not both" -}}
{{- end -}}
{{- if and .Values.admin.enabled (not .Values.admin.existingSecret) -}}
{{- fail "admin.enabled needs admin.existingSecret: the Secret holding the admin tokens (key admin.tokenKey)" -}}
{{- end -}}
{{- if and .Values.admin.ingress.enabled (not (and .Values.admin.enabled .Values.admin.service.enabled)) -}}
{{- fail "admin.ingress.enabled needs admin.enabled and admin.service.enabled" -}}
{{- end -}}
{{- if and .Values.admin.ingress.enabled (not .Values.admin.ingress.host) -}}
{{- fail "admin.ingress.enabled needs admin.ingress.host" -}}
{{- end -}}
{{- if .Values.secrets.values -}}
{{- $dir := printf "%s/" (include "feedsync.secretsDir" .) -}}
{{- $refs := list -}}
{{- range .Values.config.sources -}}{{- $refs = append $refs (dict "what" (printf "config.sources[%s].password_file" .name) "path" .password_file) -}}{{- end -}}
{{- range .Values.config.sinks -}}{{- if .secret_file -}}{{- $refs = append $refs (dict "what" (printf "config.sinks[%s].secret_file" .name) "path" .secret_file) -}}{{- end -}}{{- end -}}
{{- range .Values.config.sinks -}}{{- if .url_file -}}{{- $refs = append $refs (dict "what" (printf "config.sinks[%s].url_file" .name) "path" .url_file) -}}{{- end -}}{{- end -}}
{{- range $refs -}}
{{- if hasPrefix $dir .path -}}
{{- $key := trimPrefix $dir .path -}}
{{- if not (hasKey $.Values.secrets.values $key) -}}
{{- fail (printf "%s is %s but secrets.values has no key %q" .what .path $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Redis values, scaled mode only (single mode ignores them). Messages never quote a URL:
     it may carry a password. */}}
{{- define "feedsync.validateRedis" -}}
{{- $r := .Values.redis -}}
{{- $sentinel := $r.sentinel.sentinels -}}
{{- $cluster := $r.cluster.nodes -}}
{{- if not (or $r.url $r.existingSecret $sentinel $cluster) -}}
{{- fail "mode=scaled needs Redis: set redis.url, redis.existingSecret, redis.sentinel.sentinels or redis.cluster.nodes" -}}
{{- end -}}
{{- if and $sentinel $cluster -}}
{{- fail "set either redis.sentinel.sentinels or redis.cluster.nodes, not both" -}}
{{- end -}}
{{- if and (or $sentinel $cluster) (or $r.url $r.existingSecret) -}}
{{- fail "redis.sentinel / redis.cluster build the Redis URL: leave redis.url and redis.existingSecret empty (or put the whole URL there and leave redis.sentinel / redis.cluster empty)" -}}
{{- end -}}
{{- if and $sentinel (not $r.sentinel.masterName) -}}
{{- fail "redis.sentinel.sentinels needs redis.sentinel.masterName (the name the sentinels monitor)" -}}
{{- end -}}
{{- if and $r.sentinel.password (not $sentinel) -}}
{{- fail "redis.sentinel.password is set but redis.sentinel.sentinels is empty" -}}
{{- end -}}
{{- if and $r.sentinel.masterName (not $sentinel) -}}
{{- fail "redis.sentinel.masterName is set but redis.sentinel.sentinels is empty" -}}
{{- end -}}
{{- if and (or $r.username $r.password) (not (or $sentinel $cluster)) -}}
{{- fail "redis.username / redis.password are used only with redis.sentinel or redis.cluster; with redis.url or redis.existingSecret the credentials go in the URL" -}}
{{- end -}}
{{- $tls := $r.tls -}}
{{- if and $tls.existingSecret (not $tls.enabled) -}}
{{- fail "redis.tls.existingSecret is set but redis.tls.enabled is false" -}}
{{- end -}}
{{- if $tls.enabled -}}
{{- if and $r.url (not $r.existingSecret) (not (regexMatch "^rediss(\\+(cluster|sentinel))?://" $r.url)) -}}
{{- fail (printf "redis.tls.enabled needs a rediss:// (or rediss+cluster://, rediss+sentinel://) redis.url, but it starts with %s:// (plain TCP: the password would travel in clear)" (regexReplaceAll "://.*$" $r.url "")) -}}
{{- end -}}
{{- if and (or $tls.certKey $tls.keyKey) (not (and $tls.certKey $tls.keyKey)) -}}
{{- fail "redis.tls.certKey and redis.tls.keyKey go together (a client certificate needs its key)" -}}
{{- end -}}
{{- if and $tls.certKey (not $tls.existingSecret) -}}
{{- fail "redis.tls.certKey / keyKey name keys of redis.tls.existingSecret, which is empty" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The effective feedsync config: the user's `config` plus the keys the chart owns. */}}
{{- define "feedsync.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $queue := deepCopy (default dict .Values.config.queue) -}}
{{- if eq .Values.mode "scaled" -}}
{{- $_ := set $queue "driver" "bullmq" -}}
{{- $_ := set $queue "redis_url_file" (printf "%s/redis-url" (include "feedsync.secretsDir" .)) -}}
{{- /* rediss:// alone turns TLS on (system CAs, the URL's host): queue.redis_tls only when
       there is more to say. */ -}}
{{- $tls := .Values.redis.tls -}}
{{- if $tls.enabled -}}
{{- $redisTls := dict -}}
{{- $dir := include "feedsync.redisTlsDir" . -}}
{{- range (include "feedsync.redisTlsItems" . | fromYamlArray) -}}
{{- $_ := set $redisTls (get (dict "ca.crt" "ca_file" "tls.crt" "cert_file" "tls.key" "key_file") .path) (printf "%s/%s" $dir .path) -}}
{{- end -}}
{{- with $tls.servername -}}{{- $_ := set $redisTls "servername" . -}}{{- end -}}
{{- if eq $tls.rejectUnauthorized false -}}{{- $_ := set $redisTls "reject_unauthorized" false -}}{{- end -}}
{{- if $redisTls -}}{{- $_ := set $queue "redis_tls" $redisTls -}}{{- end -}}
{{- end -}}
{{- if .Values.redis.sentinel.password -}}
{{- $_ := set $queue "redis_sentinel_password_file" (printf "%s/redis-sentinel-password" (include "feedsync.secretsDir" .)) -}}
{{- end -}}
{{- with .Values.redis.minReplicasAcked -}}
{{- $_ := set $queue "min_replicas_acked" (int .) -}}
{{- end -}}
{{- else -}}
{{- $_ := set $queue "driver" "local" -}}
{{- end -}}
{{- $_ := set $cfg "queue" $queue -}}
{{- /* Scaled mode keeps the pollers' state in Redis: no local store, no volume. */ -}}
{{- if ne .Values.mode "scaled" -}}
{{- $_ := set $cfg "store" (dict "path" "/data/feedsync.db") -}}
{{- end -}}
{{- $_ := set $cfg "http" (dict "host" "0.0.0.0" "port" (int .Values.metrics.port)) -}}
{{- if .Values.admin.enabled -}}
{{- $admin := dict "enabled" true "port" (int .Values.admin.port) "host" (ternary "0.0.0.0" "127.0.0.1" .Values.admin.service.enabled) -}}
{{- $_ := set $admin "token_file" (printf "%s/%s" (include "feedsync.adminDir" .) .Values.admin.tokenKey) -}}
{{- with .Values.admin.readTokenKey -}}
{{- $_ := set $admin "read_token_file" (printf "%s/%s" (include "feedsync.adminDir" $) .) -}}
{{- end -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Volumes shared by every feedsync pod (the /data volume differs per workload). */}}
{{- define "feedsync.volumes" -}}
- name: config
  configMap:
    name: {{ include "feedsync.fullname" . }}
- name: tmp
  emptyDir: {}
{{- $sources := list -}}
{{- if .Values.secrets.existingSecret -}}
{{- $sources = append $sources (dict "secret" (dict "name" .Values.secrets.existingSecret)) -}}
{{- end -}}
{{- if include "feedsync.chartSecretNeeded" . -}}
{{- $items := list -}}
{{- if not .Values.secrets.existingSecret -}}
{{- range $key, $_ := .Values.secrets.values -}}{{- $items = append $items (dict "key" $key "path" $key) -}}{{- end -}}
{{- end -}}
{{- if include "feedsync.redisManagedByChart" . -}}
{{- $items = append $items (dict "key" "redis-url" "path" "redis-url") -}}
{{- if .Values.redis.sentinel.password -}}
{{- $items = append $items (dict "key" "redis-sentinel-password" "path" "redis-sentinel-password") -}}
{{- end -}}
{{- end -}}
{{- $sources = append $sources (dict "secret" (dict "name" (include "feedsync.fullname" .) "items" $items)) -}}
{{- end -}}
{{- if and (eq .Values.mode "scaled") .Values.redis.existingSecret -}}
{{- $sources = append $sources (dict "secret" (dict "name" .Values.redis.existingSecret "items" (list (dict "key" .Values.redis.existingSecretKey "path" "redis-url")))) -}}
{{- end -}}
{{- if $sources }}
- name: secrets
  projected:
    # Group-readable only: fsGroup gives the files to the feedsync group.
    defaultMode: 0440
    sources:
      {{- toYaml $sources | nindent 6 }}
{{- end }}
{{- with include "feedsync.redisTlsItems" . }}
- name: redis-tls
  secret:
    secretName: {{ $.Values.redis.tls.existingSecret }}
    # Group-readable only, like the credentials.
    defaultMode: 0440
    items:
      {{- . | nindent 6 }}
{{- end }}
{{- if .Values.admin.enabled }}
- name: admin-tokens
  secret:
    secretName: {{ .Values.admin.existingSecret }}
    # Group-readable only, like the credentials.
    defaultMode: 0440
    items:
      - key: {{ .Values.admin.tokenKey }}
        path: {{ .Values.admin.tokenKey }}
      {{- with .Values.admin.readTokenKey }}
      - key: {{ . }}
        path: {{ . }}
      {{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{- define "feedsync.hasSecretsVolume" -}}
{{- if or .Values.secrets.existingSecret (include "feedsync.chartSecretNeeded" .) (and (eq .Values.mode "scaled") .Values.redis.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* Topology spread constraints with `labelSelector` defaulted to the workload's own pods;
     call with (dict "root" $ "component" "..." "constraints" list). */}}
{{- define "feedsync.spreadConstraints" -}}
{{- $selector := dict "matchLabels" (merge (dict "app.kubernetes.io/component" .component) (include "feedsync.selectorLabels" .root | fromYaml)) -}}
{{- $out := list -}}
{{- range .constraints -}}
{{- $c := deepCopy . -}}
{{- if not (hasKey $c "labelSelector") -}}
{{- $_ := set $c "labelSelector" $selector -}}
{{- end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- if $out -}}
{{- toYaml $out -}}
{{- end -}}
{{- end -}}

{{/* Pod-level fields shared by every feedsync pod; call with
     (dict "root" $ "component" "..." "spread" <extra topology spread constraints>). */}}
{{- define "feedsync.podSpecCommon" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "feedsync.serviceAccountName" $root }}
# feedsync never talks to the Kubernetes API.
automountServiceAccountToken: false
enableServiceLinks: false
terminationGracePeriodSeconds: {{ include "feedsync.terminationGracePeriodSeconds" $root }}
{{- with $root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $spread := include "feedsync.spreadConstraints" (dict "root" $root "component" .component "constraints" (concat (default (list) $root.Values.topologySpreadConstraints) (default (list) .spread))) }}
{{- if $spread }}
topologySpreadConstraints:
  {{- $spread | nindent 2 }}
{{- end }}
{{- with $root.Values.initContainers }}
initContainers:
  {{- range . }}
  {{- $c := deepCopy . }}
  {{- if and (not (hasKey $c "securityContext")) $root.Values.securityContext }}
  {{- $_ := set $c "securityContext" $root.Values.securityContext }}
  {{- end }}
  - {{- toYaml $c | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The feedsync container; call with (dict "root" $ "command" "run|poll|work" "resources" ... "data" bool). */}}
{{- define "feedsync.container" -}}
{{- $root := .root -}}
- name: feedsync
  image: {{ include "feedsync.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args: [{{ .command | quote }}]
  env:
    - name: FEEDSYNC_CONFIG
      value: /etc/feedsync/feedsync.yaml
    {{- with $root.Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $root.Values.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - name: metrics
      containerPort: {{ $root.Values.metrics.port }}
      protocol: TCP
    {{- if $root.Values.admin.enabled }}
    - name: admin
      containerPort: {{ $root.Values.admin.port }}
      protocol: TCP
    {{- end }}
  {{- range $probe := list "startupProbe" "livenessProbe" "readinessProbe" }}
  {{- with index $root.Values $probe }}
  {{ $probe }}:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- end }}
  {{- with $root.Values.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: config
      mountPath: /etc/feedsync/feedsync.yaml
      subPath: feedsync.yaml
      readOnly: true
    {{- if include "feedsync.hasSecretsVolume" $root }}
    - name: secrets
      mountPath: {{ include "feedsync.secretsDir" $root }}
      readOnly: true
    {{- end }}
    {{- if include "feedsync.redisTlsItems" $root }}
    - name: redis-tls
      mountPath: {{ include "feedsync.redisTlsDir" $root }}
      readOnly: true
    {{- end }}
    {{- if $root.Values.admin.enabled }}
    - name: admin-tokens
      mountPath: {{ include "feedsync.adminDir" $root }}
      readOnly: true
    {{- end }}
    {{- if .data }}
    - name: data
      mountPath: /data
    {{- end }}
    - name: tmp
      mountPath: /tmp
    {{- with $root.Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/* Roll pods whenever the rendered config or the chart's Secret changes. */}}
{{- define "feedsync.podAnnotations" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Whether something other than `worker.replicas` owns the worker count (HPA or KEDA). */}}
{{- define "feedsync.workersAutoscaled" -}}
{{- if and (eq .Values.mode "scaled") (or .Values.worker.autoscaling.enabled .Values.worker.autoscaling.keda.enabled) -}}true{{- end -}}
{{- end -}}

{{- define "feedsync.autoscalingBounds" -}}
{{- if gt (int .Values.worker.autoscaling.minReplicas) (int .Values.worker.autoscaling.maxReplicas) -}}
{{- fail "worker.autoscaling.minReplicas must not exceed worker.autoscaling.maxReplicas" -}}
{{- end -}}
{{- end -}}
