# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The files the agent can read: host keys, seed, hostname/hosts, cloud-init status and result, authorized keys."""

from __future__ import annotations

import json
from typing import Any

from .cloudinit_status import CloudinitStatus
from .hostkeys import host_public_keys
from .model import CLOUDINIT_STAGES, IMAGE_DEFAULT_HOSTNAME, IMAGE_DEFAULT_USER


class GuestFiles(CloudinitStatus):
    """The guest's file system as cloud-init leaves it, on the guest's uptime."""

    def _file(self, path: str) -> str | None:
        now = self.uptime()
        keys_at = CLOUDINIT_STAGES[1][2] * self.cloudinit_done_at
        for keytype in ("ed25519", "ecdsa", "rsa"):
            if path == f"/etc/ssh/ssh_host_{keytype}_key.pub":
                if now < keys_at:
                    return None
                return f"{host_public_keys(self.vmid, (keytype,))[keytype]} root@{self.hostname}\n"
        seed_names = {"user-data": "user", "meta-data": "meta", "network-config": "network", "vendor-data": "vendor"}
        if path.startswith("/var/lib/cloud/seed/nocloud/"):
            part = seed_names.get(path.rsplit("/", 1)[1])
            return self.seed.get(part) if part else None
        init_done = now >= keys_at
        if path == "/etc/hostname":
            return f"{self.hostname if init_done else IMAGE_DEFAULT_HOSTNAME}\n"
        if path == "/etc/hosts" and init_done and self.cloud_config.get("manage_etc_hosts") in (True, "template"):
            return _HOSTS_TMPL.format(fqdn=self.fqdn, hostname=self.hostname)
        if path in ("/var/lib/cloud/data/status.json", "/run/cloud-init/status.json"):
            v1 = self._status_v1(now)
            return (
                None if v1 is None else json.dumps({"v1": v1}, indent=1, sort_keys=True, separators=(",", ": ")) + "\n"
            )
        if path in ("/var/lib/cloud/data/result.json", "/run/cloud-init/result.json"):
            if now < self.cloudinit_done_at:
                return None
            v1 = self._status_v1(now) or {}
            errors = [e for stage in CLOUDINIT_STAGES for e in v1[stage[0]]["errors"]]
            body = {"v1": {"datasource": v1.get("datasource"), "errors": errors}}
            return json.dumps(body, indent=1, sort_keys=True, separators=(",", ": ")) + "\n"
        if path in ("/var/lib/cloud/data/instance-id", "/var/lib/cloud/instance/instance-id") and init_done:
            return f"{self.meta.get('instance-id', 'iid-datasource-none')}\n"
        if path == "/var/lib/cloud/instance/user-data.txt" and init_done:
            return self.seed.get("user", "")
        if path == "/var/lib/cloud/instance/vendor-data.txt" and init_done:
            return self.seed.get("vendor", "")
        if init_done and path.endswith("/.ssh/authorized_keys"):
            for user in self.users():
                if path == f"{user['home']}/.ssh/authorized_keys" and user["ssh_authorized_keys"]:
                    return "".join(f"{k}\n" for k in user["ssh_authorized_keys"])
        return None

    def users(self) -> list[dict[str, Any]]:
        """Accounts cloud-init configured from the seed's user-data (the default user first)."""
        cfg = self.cloud_config
        keys = [str(k) for k in cfg.get("ssh_authorized_keys") or [] if isinstance(k, str)]
        users_cfg = cfg.get("users", ["default"])
        if isinstance(users_cfg, (str, dict)):
            users_cfg = [users_cfg]
        if not isinstance(users_cfg, list):
            users_cfg = ["default"]
        result: list[dict[str, Any]] = []
        user_key = cfg.get("user")
        default_name = IMAGE_DEFAULT_USER
        if isinstance(user_key, str):
            default_name = user_key
        elif isinstance(user_key, dict) and isinstance(user_key.get("name"), str):
            default_name = user_key["name"]
        has_default = "default" in users_cfg or (user_key is not None and "users" not in cfg)
        if has_default or user_key is not None:
            result.append(
                {
                    "name": default_name,
                    "default": True,
                    "ssh_authorized_keys": keys,
                    "password_set": "password" in cfg,
                    "home": "/root" if default_name == "root" else f"/home/{default_name}",
                }
            )
        for entry in users_cfg:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                own = [str(k) for k in entry.get("ssh_authorized_keys") or []]
                name = entry["name"]
                result.append(
                    {
                        "name": name,
                        "default": False,
                        "ssh_authorized_keys": own,
                        "password_set": any(k in entry for k in ("passwd", "hashed_passwd", "plain_text_passwd")),
                        "home": "/root" if name == "root" else f"/home/{name}",
                    }
                )
        return result


_HOSTS_TMPL = """# Your system has configured 'manage_etc_hosts' as True.
# As a result, if you wish for changes to this file to persist
# then you will need to either
# a.) make changes to the master file in /etc/cloud/templates/hosts.debian.tmpl
# b.) change or remove the value of 'manage_etc_hosts' in
#     /etc/cloud/cloud.cfg or cloud-config from user-data
#
127.0.1.1 {fqdn} {hostname}
127.0.0.1 localhost

# The following lines are desirable for IPv6 capable hosts
::1 localhost ip6-localhost ip6-loopback
ff02::1 ip6-allnodes
ff02::2 ip6-allrouters
"""
