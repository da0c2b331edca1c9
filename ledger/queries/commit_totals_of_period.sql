-- Valid COMMIT amounts of one period (:period, YYYY-MM) per tenant and metric, as of commit_totals_state.through_seq.
SELECT tenant, metric, amount FROM commit_totals WHERE period = :period AND amount <> 0 ORDER BY tenant, metric
