#!/bin/bash
# STAND-IN installer of the a3rl simulator's HDK packages. NOT vendor code. Its option
# rules, messages and exit codes follow the vendor's driver install.sh; see the notes in
# tools/a3rl/sim/standins.py for what is confirmed and what is guessed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/package.info"
runfilename=${1:-$PKG_FILE}
shift
ROOT=${A3RL_STANDIN_ROOT:-}   # test hook: prefix of every path touched
ROOT=${ROOT%/}
if [ "$PKG_KIND" = driver ]; then TAG=Driver PFX=Driver; else TAG=Firmware PFX=Firmware; fi
SUB=$PKG_KIND
SECLOG=$ROOT/var/log/ascend_seclog
LOGFILE=$SECLOG/ascend_install.log
OPLOG=$SECLOG/operation.log
INFO=$ROOT/etc/ascend_install.info
KNOBS=$ROOT/etc/a3rl-sim
MARKER=$ROOT/var/lib/a3rl-sim/reboot-required
DEFAULT_PATH=/usr/local/Ascend

now() { date +"%Y-%m-%d %H:%M:%S"; }
say() { echo "[$TAG] [$(now)] $1"; }
sayc() { echo -e "[$TAG] [$(now)] $1"; }
log() { echo "[$TAG] [$(now)] $1" >> "$LOGFILE"; }
both() { say "$1"; log "$1"; }
finish() { both "[INFO]End time: $(now)"; exit "$1"; }
usage_error() { log "$1"; say "$1"; finish 1; }
getp() { [ -f "$INFO" ] && sed -n "s|^$1=||p" "$INFO" | tail -n 1; }
setp() {
    mkdir -p "$(dirname "$INFO")" && touch "$INFO"
    if grep -q "^$1=" "$INFO"; then sed -i "s|^$1=.*|$1=$2|" "$INFO"; else echo "$1=$2" >> "$INFO"; fi
    chmod 644 "$INFO"
}
delp() { [ -f "$INFO" ] && sed -i "/^$1=/d" "$INFO"; }
oplog() {
    local level=UNKNOWN
    case $operation in Install) level=SUGGESTION ;; Upgrade) level=MINOR ;; Uninstall) level=MAJOR ;; esac
    if [ "$operation" = Install ]; then
        echo "$operation $level root $start_time 127.0.0.1 $runfilename $1 install_type=$installType; cmdlist=$all_param." >> "$OPLOG"
    else
        echo "$operation $level root $start_time 127.0.0.1 $runfilename $1 cmdlist=$all_param." >> "$OPLOG"
    fi
}
mark() {  # stand-in only: what waits for a reboot, one line per package kind
    mkdir -p "$(dirname "$MARKER")"
    { [ -f "$MARKER" ] && grep -v "^$PKG_KIND " "$MARKER"; echo "$PKG_KIND $1"; } > "$MARKER.tmp"
    mv "$MARKER.tmp" "$MARKER"
}
installed_version() { sed -n 's/^Version=//p' "$ROOT$1/$SUB/version.info" 2>/dev/null | head -n 1; }
ask() {  # the vendor loops on stdin for y/n; the stand-in gives up at end of input
    local yn
    while true; do
        if ! read -r yn; then
            both "[ERROR]a3rl stand-in: no answer on stdin; the real installer would wait here for y/n. Use --quiet."
            oplog failed; finish 1
        fi
        case $yn in
            y) return 0 ;;
            n) say "[INFO]Stop installation!"; finish 0 ;;
            *) say "[ERROR]ERR_NO:0x0002;ERR_DES:input error, please input again!" ;;
        esac
    done
}

# The stand-in only enforces root on a real node, not under the test-hook root.
if [ -z "$ROOT" ] && [ "$(id -u)" -ne 0 ]; then
    say "[ERROR]ERR_NO:0x0093;ERR_DES:do not have root permission, operation failed, please use root permission!"
    exit 1
fi
mkdir -p "$SECLOG" && touch "$LOGFILE" "$OPLOG"
all_param="$*"
if [ $# -eq 0 ]; then
    say "[ERROR]ERR_NO:0x0004;ERR_DES:Unrecognized parameters. Try './xxx.run --help' for more information."
    exit 1
fi
start_time=$(now)
both "[INFO]Start time: $start_time"
say "[INFO]LogFile: /var/log/ascend_seclog/ascend_install.log"
say "[INFO]OperationLogFile: /var/log/ascend_seclog/operation.log"
log "[INFO]UserCommand: $runfilename $all_param"
inst_path=$(getp "${PFX}_Install_Path_Param")
base_version=""
[ -n "$inst_path" ] && base_version=$(installed_version "$inst_path")
if [ -n "$base_version" ]; then both "[INFO]base version is $base_version."; else log "[INFO]base version was destroyed or not exist."; fi

i=0 j=0 full=n run=n upgrade=n uninstall=n version=n quiet=n check=n input_for_all=n for_all=no force=n
in_user=n in_group=n username="" usergroup="" in_path=n path_arg="" installType="" operation=Install
unrecognized() { usage_error "[ERROR]ERR_NO:0x0004;ERR_DES: Unrecognized parameters: $1. Try './xxx.run --help' for more information."; }
unique() { [ -z "$installType" ] || usage_error "[ERROR]ERR_NO:0x0004;ERR_DES:only support one type: full/run/docker/devel/boot-server, operation failed!"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --uninstall) i=$((i+1)); operation=Uninstall; uninstall=y ;;
        --upgrade) i=$((i+1)); j=$((j+1)); operation=Upgrade; upgrade=y ;;
        --full) i=$((i+1)); j=$((j+1)); unique; installType=full; full=y ;;
        --version) i=$((i+1)); version=y ;;
        --quiet) i=$((i+1)); quiet=y ;;
        --check) i=$((i+1)); check=y ;;
        --install-for-all) input_for_all=y; for_all=yes ;;
        --force)
            [ "$PKG_KIND" = driver ] || unrecognized "$1"
            force=y ;;
        --run)
            [ "$PKG_KIND" = driver ] || unrecognized "$1"
            i=$((i+1)); j=$((j+1)); unique; installType=run; run=y ;;
        --install-username=*)
            [ "$PKG_KIND" = driver ] || unrecognized "$1"
            i=$((i+1)); in_user=y; username=${1#*=} ;;
        --install-usergroup=*)
            [ "$PKG_KIND" = driver ] || unrecognized "$1"
            i=$((i+1)); in_group=y; usergroup=${1#*=} ;;
        --install-path=*)
            [ "$PKG_KIND" = driver ] || unrecognized "$1"
            i=$((i+1)); in_path=y; path_arg=${1#*=}
            [ -n "$path_arg" ] || usage_error "[ERROR]ERR_NO:0x0003;ERR_DES:install path is null, install failed" ;;
        --devel|--docker|--vnpu_host|--vnpu_guest|--vnpu_docker_host|--boot-server-path=*)
            [ "$PKG_KIND" = driver ] || unrecognized "$1"
            usage_error "[ERROR]a3rl stand-in: $1 is a real option that the stand-in does not simulate." ;;
        -*) unrecognized "$1" ;;
        *) break ;;
    esac
    shift
done

if [ $upgrade = y ] || [ $full = y ] || [ $run = y ]; then
    sayc "[WARNING]\033[33mDo not power off or restart the system during the installation/upgrade\033[0m"
fi
if [ $version = y ] || [ $uninstall = y ] || [ $check = y ]; then
    [ $i -gt 1 ] && usage_error "[ERROR]ERR_NO:0x0004;ERR_DES:version/uninstall/check/boot-server can't use with other parameters."
else
    [ $j -ne 1 ] && usage_error "[ERROR]ERR_NO:0x0004;ERR_DES:param need used with full/run/docker/upgrade/devel."
    [ $in_path = y ] && [ $upgrade = y ] && usage_error "[ERROR]ERR_NO:0x0004;ERR_DES:install-path param need used with full/run/docker/devel."
    if [ $in_user = y ] || [ $in_group = y ]; then
        if [ $in_user = n ] || [ $in_group = n ]; then
            both "[ERROR]ERR_NO:0x0004;ERR_DES:Username and usergroup are not specified at the same time."
            say "[ERROR]Please input the right params and try again."
            finish 1
        fi
        [ $upgrade = y ] && usage_error "[ERROR]ERR_NO:0x0004;ERR_DES:install-username and install-usergroup params need used with full/run/docker/devel."
        [ -z "$username" ] && usage_error "[ERROR]ERR_NO:0x0091;ERR_DES:input_install_username is empty"
        [ -z "$usergroup" ] && usage_error "[ERROR]ERR_NO:0x0091;ERR_DES:input_install_group is empty"
        [ "$username" = root ] && [ $input_for_all = n ] && usage_error "[ERROR]ERR_NO:0x0091;ERR_DES:username not permission for root"
        [ "$usergroup" = root ] && [ $input_for_all = n ] && usage_error "[ERROR]ERR_NO:0x0091;ERR_DES:usergroup not permission for root"
    fi
fi
if [ $check = y ]; then both "[INFO]a3rl stand-in: nothing to check beyond the archive checksum."; finish 0; fi
if [ $version = y ]; then say "[INFO]$PKG_KIND version :$PKG_VERSION"; finish 0; fi
if [ $upgrade = y ]; then installType=$(getp "${PFX}_Install_Type"); installType=${installType:-full}; fi

# Where to install: --install-path, else the recorded path, else the default.
if [ $in_path = y ]; then
    path=${path_arg%/}
    [[ "$path" =~ ^/[A-Za-z0-9_/-]+$ ]] || usage_error "[ERROR]ERR_NO:0x0003;ERR_DES:The install-path [$path_arg] is invalid according to regular-expression, only characters in [a-z,A-Z,0-9,-,_] are supported."
elif [ -n "$inst_path" ]; then
    path=$inst_path
elif [ "$PKG_KIND" = firmware ] && [ -n "$(getp Driver_Install_Path_Param)" ]; then
    path=$(getp Driver_Install_Path_Param)
else
    path=$DEFAULT_PATH
fi
if [ $uninstall = n ] && [ "$path" != "$DEFAULT_PATH" ] && [ ! -d "$ROOT$(dirname "$path")" ]; then
    usage_error "[ERROR]ERR_NO:0x0003;ERR_DES:install path $(dirname "$path") not exists,runpackage only support create one level of directory,need create $(dirname "$path")."
fi

# Driver: the run user must exist (read from the files, as the vendor script does).
if [ "$PKG_KIND" = driver ] && [ $uninstall = n ]; then
    rec_user=$(getp UserName) rec_group=$(getp UserGroup)
    if [ $in_user = y ]; then
        if { [ -n "$rec_user" ] && [ "$username" != "$rec_user" ]; } || { [ -n "$rec_group" ] && [ "$usergroup" != "$rec_group" ]; }; then
            usage_error "[ERROR]ERR_NO:0x0095;ERR_DES:The user and group are not same with last installation,do not support overwriting installation"
        fi
    else
        username=${rec_user:-HwHiAiUser} usergroup=${rec_group:-HwHiAiUser}
    fi
    if [ $upgrade = y ] && [ $input_for_all = n ]; then
        for_all=$(getp Driver_Install_For_All); for_all=${for_all:-no}
    fi
    user_line=$(grep "^$username:" "$ROOT/etc/passwd" 2>/dev/null | head -n 1)
    [ -n "$user_line" ] || usage_error "[ERROR]ERR_NO:0x0091;ERR_DES:${username} not exists! Please add ${username}"
    group_line=$(grep "^$usergroup:" "$ROOT/etc/group" 2>/dev/null | head -n 1)
    [ -n "$group_line" ] || usage_error "[ERROR]ERR_NO:0x0091;ERR_DES:${usergroup} group not exists! Please add ${usergroup} group"
    if [ "$(echo "$user_line" | cut -d: -f4)" != "$(echo "$group_line" | cut -d: -f3)" ] &&
        ! echo ",$(echo "$group_line" | cut -d: -f4)," | grep -q ",$username,"; then
        usage_error "[ERROR]ERR_NO:0x0096;ERR_DES:${usergroup} not right! Please check the relatianship of ${username} and ${usergroup}"
    fi
    say "[INFO]set username and usergroup, ${username}:${usergroup}"
fi

# The device nodes the driver's kernel modules create (stand-in: the null device's numbers;
# plain files under the test-hook root). NPUS from the simulator's node.conf.
make_devices() {
    local npus=16 d
    [ -r "$KNOBS/node.conf" ] && npus=$(sed -n 's/^NPUS=//p' "$KNOBS/node.conf" | tail -n 1)
    mkdir -p "$ROOT/dev"
    for d in $(seq 0 $((npus - 1)) | sed 's/^/davinci/') davinci_manager devmm_svm hisi_hdc; do
        [ -e "$ROOT/dev/$d" ] && continue
        if [ -z "$ROOT" ]; then mknod -m 666 "/dev/$d" c 1 3; else : > "$ROOT/dev/$d"; fi
    done
}

# Before the installed driver is replaced or removed, the vendor's checkUserProcess and
# checkUserDocker: a process with a device file open (fuser, or /proc/*/fd), or a running
# Docker container whose `docker inspect` names a device, stops the installer. Prints
# the log's warning line and returns 1 when something holds a device.
devices_held() {
    local f docker_ids fds
    # One pass over every process's open files (the vendor loops over fuser per device).
    fds=$(find /proc/[0-9]*/fd -maxdepth 1 -type l \( -lname "$ROOT/dev/davinci*" \
        -o -lname "$ROOT/dev/devmm_svm" -o -lname "$ROOT/dev/hisi_hdc" \) 2>/dev/null \
        | grep -v "^/proc/$$/" | cut -d/ -f3 | sort -un | tr '\n' ' ')
    if [ -n "$fds" ]; then echo "[WARNING]NPU device files have user process: $fds"; return 1; fi
    if command -v docker >/dev/null 2>&1 && docker_ids=$(docker ps -q 2>/dev/null) && [ -n "$docker_ids" ]; then
        for f in /dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc; do
            # shellcheck disable=SC2086
            if docker inspect $docker_ids 2>/dev/null | grep -q "\"$f\""; then
                echo "[WARNING]$f has used by docker"; return 1
            fi
        done
    fi
    return 0
}

refuse_if_devices_held() {
    local held
    [ "$force" = y ] && return 0
    held=$(devices_held) && return 0
    log "$held"
    sayc "[ERROR]\033[31mThe davinci nodes are occupied by some processes, please stop processes and install or uninstall again, details in : /var/log/ascend_seclog/ascend_install.log \033[0m"
    log "[ERROR]The davinci nodes are occupied by some processes, please stop processes and install or uninstall again."
    say "[INFO]If you want to install or uninstall the driver forcibly, add the force parameter. For details, see [--help]."
    oplog failed; finish 1
}

remove_files() {  # $1: install path of the installed package
    rm -rf "$ROOT${1:?}/${SUB:?}"
    if [ "$PKG_KIND" = driver ]; then
        rm -f "$ROOT/usr/local/sbin/npu-smi"
        [ -L "$ROOT/usr/local/bin/npu-smi" ] && rm -f "$ROOT/usr/local/bin/npu-smi"
    fi
    return 0
}

install_files() {
    local d=$ROOT$path/$SUB
    mkdir -p "$ROOT$path" && chmod 755 "$ROOT$path"
    rm -rf "$d"
    mkdir -p "$d/script/a3rl-standin"
    install -m 0444 "$here/version.info" "$d/version.info"
    cp "$here/install.sh" "$here/package.info" "$d/script/a3rl-standin/"
    cat > "$d/script/uninstall.sh" <<EOF
#!/bin/bash
# STAND-IN (a3rl simulator): removes the stand-in $PKG_KIND package, like the vendor's
# $SUB/script/uninstall.sh. Its options (--quiet, --force) are accepted and ignored.
cd "\$(dirname "\$0")/a3rl-standin" && exec bash ./install.sh uninstall.sh --uninstall
EOF
    chmod 755 "$d/script/uninstall.sh"
    if [ "$PKG_KIND" = driver ]; then
        mkdir -p "$d/lib64/common" "$d/lib64/driver" "$d/tools" "$ROOT/usr/local/dcmi" \
            "$ROOT/var/log/npu/slog/slogd" "$ROOT/usr/local/bin"
        echo "a3rl simulator STAND-IN: placeholder, no libraries" > "$d/lib64/A3RL-STANDIN"
        echo "a3rl simulator STAND-IN: placeholder, no DCMI" > "$ROOT/usr/local/dcmi/A3RL-STANDIN"
        install -D -m 0755 "$here/npu-smi" "$ROOT/usr/local/sbin/npu-smi"
        install -m 0755 "$here/hccn_tool" "$d/tools/hccn_tool"
        ln -sfn ../sbin/npu-smi "$ROOT/usr/local/bin/npu-smi"
        make_devices
    fi
}

record_install() {
    if [ "$PKG_KIND" = driver ]; then
        [ -n "$(getp UserName)" ] || setp UserName "$username"
        [ -n "$(getp UserGroup)" ] || setp UserGroup "$usergroup"
        setp Driver_Install_Type "$installType"
        setp Driver_Install_Path_Param "$path"
        setp Driver_Install_For_All "$for_all"
        if [ $upgrade = n ] || [ -z "$(getp Driver_Install_Mode)" ]; then
            setp Driver_Install_Mode normal  # an upgrade keeps the recorded mode
        fi
    else
        setp Firmware_Install_Type "$installType"
        setp Firmware_Install_Path_Param "$path"
    fi
}

forget_install() {
    delp "${PFX}_Install_Path_Param"; delp "${PFX}_Install_Type"
    if [ "$PKG_KIND" = driver ]; then delp Driver_Install_Mode; delp Driver_Install_For_All; fi
    grep -q "Install_Path_Param" "$INFO" 2>/dev/null || rm -f "$INFO"
    rmdir "$ROOT$inst_path" 2>/dev/null
    return 0
}

hot_reset_ok() { [ "$(cat "$KNOBS/driver-hotreset" 2>/dev/null)" = success ]; }

driver_done() {  # $1: Install|Upgrade
    local word=installed
    [ "$1" = Upgrade ] && word=upgraded
    log "[INFO]$PKG_KIND $word, version $PKG_VERSION"
    oplog success
    if hot_reset_ok; then
        sayc "[INFO]\033[32mDriver package $word successfully! The new version takes effect immediately. \033[0m"
        finish 0
    fi
    sayc "[INFO]\033[32mDriver package $word successfully! \033[0m\033[31mReboot needed for installation/upgrade to take effect! \033[0m"
    mark "$PKG_VERSION $word $(now): reboot needed for installation/upgrade to take effect"
    finish 2
}

firmware_done() {  # $1: Install|Upgrade
    local word=installed
    [ "$1" = Upgrade ] && word=upgraded
    both "[INFO]Firmware package $word successfully! Reboot now or after driver installation for the installation/upgrade to take effect."
    mark "$PKG_VERSION $word $(now): the new firmware takes effect after a reboot"
    oplog success
    finish 0
}

if [ $uninstall = y ]; then
    if [ -z "$inst_path" ]; then
        both "[ERROR]ERR_NO:0x0080;ERR_DES:$TAG package is not installed on this device, uninstall failed"
        oplog failed; finish 1
    fi
    [ "$PKG_KIND" = driver ] && refuse_if_devices_held
    remove_files "$inst_path"
    forget_install
    oplog success
    if [ "$PKG_KIND" = firmware ]; then
        both "[INFO]Firmware package uninstalled successfully! Uninstallation takes effect immediately."
    elif hot_reset_ok; then
        sayc "[INFO]\033[32mDriver package uninstalled successfully! Uninstallation takes effect immediately. \033[0m"
    else
        sayc "[INFO]\033[32mDriver package uninstalled successfully! \033[0m\033[31mReboot needed for uninstallation to take effect! \033[0m"
        mark "uninstalled $(now): reboot needed for uninstallation to take effect"
    fi
    finish 0
fi

if [ "$PKG_KIND" = firmware ]; then
    drv=$(getp Driver_Install_Path_Param)
    if [ -z "$drv" ] || [ ! -f "$ROOT$drv/driver/version.info" ]; then
        both "[ERROR]The driver package is not installed, please install the driver package first."
        oplog failed; finish 1
    fi
    chips=0
    for f in "$ROOT"/dev/davinci*; do
        [[ ${f##*/} =~ ^davinci[0-9]+$ ]] && chips=$((chips + 1))
    done
    if [ "$chips" -eq 0 ]; then
        both "[ERROR]No NPU chip is found, the firmware cannot be upgraded."
        oplog failed; finish 1
    fi
    if [ $upgrade = y ] && [ "$base_version" = "$PKG_VERSION" ]; then
        both "[INFO]The firmware version is already $PKG_VERSION, no upgrade is needed."
        oplog success; finish 0
    fi
    [ -n "$inst_path" ] && remove_files "$inst_path"
    say "[INFO]upgradePercentage: 0%"
    install_files
    say "[INFO]upgradePercentage: 100%"
    both "[INFO]The firmware of [$chips] chips are successfully upgraded."
    record_install
    if [ $upgrade = y ] && [ -n "$inst_path" ]; then firmware_done Upgrade; else firmware_done Install; fi
fi

# Driver: first install, overwrite install (--full/--run) or upgrade.
mode=Install
if [ -n "$inst_path" ]; then
    refuse_if_devices_held
    if [ $upgrade = y ]; then
        mode=Upgrade
    elif [ -n "$base_version" ] && [ $quiet = n ]; then
        say "[INFO]Driver package has been installed on the path $inst_path, the version is ${base_version}, and the version of this package is ${PKG_VERSION},do you want to continue?  [y/n] "
        ask
    fi
    remove_files "$inst_path"
fi
operation=$mode
say "[INFO]upgradePercentage:10%"
install_files
say "[INFO]upgradePercentage:100%"
record_install
driver_done "$mode"
