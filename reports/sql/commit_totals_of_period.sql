-- Valid COMMIT amounts of one period per tenant and metric, as of commit_totals_state.through_seq.
SELECT tenant, metric, amount FROM commit_totals WHERE period = ?1 AND amount <> 0
