#!/usr/bin/env bash
# Debian packages that the cluster-environment tests need: a real SLURM cluster (slurmctld, slurmd, srun,
# sbatch, scontrol), munge for its authentication, and Open MPI's mpirun.
#
# Idempotent: when every command is already on PATH it returns at once without touching apt. Needs root
# (it runs apt-get); as another user it prints what is missing and exits 0, and the tests that need these
# programs skip with a reason (outside CI).
set -euo pipefail

# command -> Debian package that provides it
declare -A PROVIDER=(
    [slurmctld]=slurmctld
    [slurmd]=slurmd
    [srun]=slurm-client
    [munged]=munge
    [mpirun]=openmpi-bin
)

missing_commands=()
for command_name in "${!PROVIDER[@]}"; do
    if ! command -v "$command_name" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$command_name" ]; then
        missing_commands+=("$command_name")
    fi
done

if [ "${#missing_commands[@]}" -eq 0 ]; then
    echo "system-deps: slurm, munge and openmpi are installed."
    exit 0
fi

packages=(slurm-wlm munge openmpi-bin)
if [ "$(id -u)" -ne 0 ]; then
    echo "system-deps: missing ${missing_commands[*]}; not root, so not installing." >&2
    echo "system-deps: run as root: apt-get update && apt-get install -y --no-install-recommends ${packages[*]}" >&2
    echo "system-deps: until then the SLURM and MPI tests skip (outside CI)." >&2
    exit 0
fi

echo "system-deps: installing ${packages[*]} (missing: ${missing_commands[*]})"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends keeps it small; the daemons are started by the tests, not by the system, and
# policy-rc.d would be needed to stop them being started here on systems with an init, so tell dpkg not to.
apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold "${packages[@]}" >/dev/null
echo "system-deps: installed ${packages[*]}"
