// IP ACLs with nftables on the real kernel (QEMU guest): the scenarios live beside the agent's data path.
import '../../agent/datapath/ip-acl.e2e.js';
