SELECT count(*) FROM lease.renew_leases('bench', :stream, 'bench-owner', '7 days');
