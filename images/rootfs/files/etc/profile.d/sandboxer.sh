# shellcheck shell=sh
# Sandboxer: export the variables of /etc/sandboxer/env (format:
# /etc/sandboxer/README) into login shells. POSIX sh: read by bash, dash
# and busybox sh alike (the minimal image's /init uses it too).
if [ -r /etc/sandboxer/env ]; then
    while IFS= read -r sbx_env_line || [ -n "$sbx_env_line" ]; do
        # leading blanks are ignored
        sbx_env_line=${sbx_env_line#"${sbx_env_line%%[!	 ]*}"}
        case $sbx_env_line in
            '' | '#'* | ';'*) continue ;;
        esac
        sbx_env_key=${sbx_env_line%%=*}
        [ "$sbx_env_key" != "$sbx_env_line" ] || continue # no '='
        case $sbx_env_key in
            '' | [0-9]* | *[!A-Za-z0-9_]*) continue ;; # not a variable name
        esac
        export "$sbx_env_key=${sbx_env_line#*=}"
    done </etc/sandboxer/env
    unset sbx_env_line sbx_env_key
fi
