SELECT period FROM usage_totals WHERE period < ?1
UNION
SELECT period FROM commit_totals WHERE period < ?1
ORDER BY period
