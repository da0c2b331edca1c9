-- How far each (tenant, metric) was billed by the final exports of the periods before :period: the latest end of
-- the cycles their stored rows bill (a row of a month bills the month). What a billing cycle's row starts from, so
-- that a tenant moving from calendar months to cycles is never billed twice for the same days.
SELECT x.tenant, x.metric, MAX(COALESCE(x.cycle_end, c.period_end))
FROM period_exports x JOIN period_closes c ON c.period = x.period
WHERE x.period < :period
GROUP BY x.tenant, x.metric
