// IP ACLs with nftables on the real kernel (QEMU guest): the scenarios are in test/e2e/scenarios/.
import './scenarios/ip-acl.e2e.js';
