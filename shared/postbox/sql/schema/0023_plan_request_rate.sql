-- Requests a minute a tenant may make of all surfaces together (0: no limit), counted in each
-- function instance. Enforced by the functions where a stack's front door is their own URLs;
-- behind API Gateway the stage's throttle stands in front of every tenant instead.
ALTER TABLE plans ADD COLUMN requests_minute int NOT NULL DEFAULT 60000 CHECK (requests_minute >= 0);

UPDATE plans SET requests_minute = 600000 WHERE name = 'pro';
UPDATE plans SET requests_minute = 0 WHERE name = 'unlimited';
